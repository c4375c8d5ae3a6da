"""Post-training int8 / bf16 quantization (issue #16): name layers, calibrate, annotate, realize.

    layers = quantizable_layers(mod)                       # "conv2d_0", …, "dense_0"
    cal = calibrate(mod, params, batches, method="kl")     # ranges of every quantization point
    qmod, qparams = quantize_model(mod, params, cal, QuantizePlan({"conv2d_0": "fp32"}))

Modules: `layers` (names, plan), `annotate` (patterns and calibration points on the prepared float
graph), `calibrate` (range methods), `realize` (the rewrite into qnn ops), `bf16` (the plan's bf16
layers as bf16 ops), `quantize` (the driver).
"""

from autorelay.transform.quantize.annotate import Annotation, annotate, layer_support, prepare_for_quantize
from autorelay.transform.quantize.bf16 import bf16_support, realize_bf16
from autorelay.transform.quantize.calibrate import (
    METHODS,
    Calibration,
    calibrate,
    choose_range,
    kl_threshold,
    range_kl,
    range_max,
    range_percentile,
)
from autorelay.transform.quantize.layers import PRECISIONS, QuantizePlan, quantizable_layers
from autorelay.transform.quantize.quantize import Quantize, float_layers, quantize_model
from autorelay.transform.quantize.realize import activation_qparams, quantize_weight
from autorelay.transform.quantize.scheme import SCHEMES, QuantizeScheme

__all__ = [
    "METHODS", "PRECISIONS", "SCHEMES", "Annotation", "Calibration", "Quantize", "QuantizePlan",
    "QuantizeScheme", "activation_qparams", "annotate", "bf16_support",
    "calibrate", "choose_range", "float_layers", "kl_threshold", "layer_support", "prepare_for_quantize",
    "quantizable_layers", "quantize_model", "quantize_weight", "range_kl", "range_max", "range_percentile",
    "realize_bf16",
]
