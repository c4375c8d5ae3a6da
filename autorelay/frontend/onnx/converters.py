"""The converter table: ONNX op type -> `fn(builder, node) -> output expr(s)`, merged by family."""

from __future__ import annotations

from autorelay.frontend.onnx import (
    converters_activation,
    converters_attention,
    converters_control,
    converters_detection,
    converters_einsum,
    converters_grid,
    converters_linalg,
    converters_loop,
    converters_loss,
    converters_masks,
    converters_math,
    converters_nn,
    converters_norm,
    converters_pool,
    converters_qcontrib,
    converters_qlinear,
    converters_quant,
    converters_resize,
    converters_rnn,
    converters_select,
    converters_sequence,
    converters_shape,
    converters_signal,
    converters_space,
)

CONVERTERS: dict = {}
for _table in (
    converters_math.TABLE,
    converters_nn.TABLE,
    converters_pool.TABLE,
    converters_shape.TABLE,
    converters_rnn.TABLE,
    converters_resize.TABLE,
    converters_quant.TABLE,
    converters_qlinear.TABLE,
    converters_qcontrib.TABLE,
    converters_activation.TABLE,
    converters_control.TABLE,
    converters_loop.TABLE,
    converters_norm.TABLE,
    converters_select.TABLE,
    converters_space.TABLE,
    converters_masks.TABLE,
    converters_grid.TABLE,
    converters_attention.TABLE,
    converters_signal.TABLE,
    converters_einsum.TABLE,
    converters_loss.TABLE,
    converters_detection.TABLE,
    converters_sequence.TABLE,
    converters_linalg.TABLE,
):
    _clash = set(_table) & set(CONVERTERS)
    if _clash:
        raise RuntimeError(f"ONNX converters registered twice: {sorted(_clash)}")
    CONVERTERS.update(_table)

SUPPORTED_OPS = frozenset(CONVERTERS)
