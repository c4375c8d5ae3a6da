"""What names an accelerator layer in the tuning log, shared by the tuner and the build.

The tuner (`search.vta_tuning`) logs a convolution's knobs under `conv_workload_key(shape)` and the
target `vta_target(hw)`; a build of a partitioned model looks the same key up on the same target, so
the knobs a tune found are the ones the executable runs. The key depends on the layer's shape only:
the epilogue (shift, clip) costs the same few ALU instructions whatever its constants.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from autorelay.schedule.space import Config
from autorelay.target import Target
from autorelay.vta.config import VTAConfig
from autorelay.vta.conv import ConvKnobs, ConvShape, conv_fits, conv_space
from autorelay.vta.programs import DenseKnobs, dense_space
from autorelay.vta.sim import VTAError

CONV_TEMPLATE = "vta_conv2d"
CONV_TILE_KNOBS = ("tile_h", "tile_w", "tile_oc", "tile_ic", "vthreads")  # integers
CONV_CHOICE_KNOBS = ("order", "rounding")  # names; absent from configs logged before they existed
CONV_KNOBS = CONV_TILE_KNOBS + CONV_CHOICE_KNOBS
DENSE_TEMPLATE = "vta_dense"
DENSE_KNOBS = ("tile_m", "tile_n", "tile_k", "vthreads")


def vta_target(hw: VTAConfig) -> Target:
    """The tuning log's target for this accelerator: every hardware parameter enters its name."""
    digest = hashlib.sha256(hw.to_json().encode()).hexdigest()[:12]
    return Target(kind="vta", options=(("hw", digest),))


def conv_workload_key(shape: ConvShape) -> str:
    return f"{CONV_TEMPLATE}/" + hashlib.sha256(repr(shape).encode()).hexdigest()[:24]


def conv_workload(shape: ConvShape) -> dict[str, Any]:
    """The log's description of the workload (shapes, dtypes, attributes)."""
    shapes = [[1, shape.c, shape.h, shape.w], [shape.o, shape.c, shape.kh, shape.kw]]
    return {"family": CONV_TEMPLATE, "shapes": shapes, "dtypes": ["int8", "int8"],
            "attrs": {"stride": shape.stride, "pad": shape.pad}}


def default_conv_knobs(shape: ConvShape, hw: VTAConfig) -> ConvKnobs:
    """The untuned choice: the largest tile that fits with one virtual thread (most reuse per
    load, no latency hiding), larger input-channel chunks first, in the loop order and with the
    rounding the lowering had before those were knobs."""
    base = ConvKnobs()
    fitting = [k for k in conv_space(shape, hw)
               if k.vthreads == 1 and k.order == base.order and k.rounding == base.rounding]
    if not fitting:
        raise VTAError(f"{shape}: no knob setting fits the accelerator's buffers")
    return max(fitting, key=lambda k: (k.tile_h * k.tile_w * k.tile_oc * k.tile_ic, k.tile_ic))


def conv_knobs_from(config: Config | dict[str, Any], shape: ConvShape, hw: VTAConfig) -> ConvKnobs | None:
    """A logged config as knobs, or None when it is not a conv config or does not fit this shape.
    A config logged before `order` / `rounding` existed gets their defaults: the program it was
    measured as."""
    cfg = Config.from_json(config) if isinstance(config, dict) else config
    if cfg.template != CONV_TEMPLATE:
        return None
    values = cfg.as_dict()
    try:
        knobs = ConvKnobs(*(int(values[name]) for name in CONV_TILE_KNOBS),
                          **{name: str(values[name]) for name in CONV_CHOICE_KNOBS if name in values})
    except (KeyError, TypeError, ValueError):
        return None
    return knobs if conv_fits(shape, knobs, hw) else None


def default_dense_knobs(m: int, n: int, k: int, hw: VTAConfig) -> DenseKnobs:
    """The untuned dense choice, by the same rule as convolutions (no dense tuning task yet)."""
    space = [d for d in dense_space(m, n, k, hw) if d.vthreads == 1]
    if not space:
        raise VTAError(f"dense {m}x{k} @ {k}x{n}: no knob setting fits the accelerator's buffers")
    return max(space, key=lambda d: (d.tile_m * d.tile_n * d.tile_k, d.tile_k))


def dense_workload_key(m: int, n: int, k: int) -> str:
    return f"{DENSE_TEMPLATE}/{m}x{k}x{n}"


def dense_workload(m: int, n: int, k: int) -> dict[str, Any]:
    return {"family": DENSE_TEMPLATE, "shapes": [[m, k], [n, k]], "dtypes": ["int8", "int8"], "attrs": {}}


def dense_knobs_from(config: Config | dict[str, Any], m: int, n: int, k: int,
                     hw: VTAConfig) -> DenseKnobs | None:
    """A logged config as dense knobs, or None when it is not one or does not fit this shape."""
    cfg = Config.from_json(config) if isinstance(config, dict) else config
    if cfg.template != DENSE_TEMPLATE:
        return None
    try:
        knobs = DenseKnobs(*(int(cfg[name]) for name in DENSE_KNOBS))
    except (KeyError, TypeError, ValueError):
        return None
    return knobs if knobs in dense_space(m, n, k, hw) else None


def conv_blocks(shape: ConvShape, hw: VTAConfig) -> tuple[int, int]:
    """(output blocks, input blocks) of a convolution."""
    return math.ceil(shape.o / hw.block_out), math.ceil(shape.c / hw.block_in)


__all__ = ["CONV_CHOICE_KNOBS", "CONV_KNOBS", "CONV_TEMPLATE", "CONV_TILE_KNOBS", "DENSE_KNOBS",
           "DENSE_TEMPLATE", "conv_knobs_from", "conv_workload", "conv_workload_key", "default_conv_knobs",
           "default_dense_knobs", "dense_knobs_from", "dense_workload", "dense_workload_key", "vta_target"]
