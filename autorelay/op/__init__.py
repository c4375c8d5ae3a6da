"""Operators, one `OpDef` each, grouped by family. Importing this package registers them all."""

from autorelay.op import (  # noqa: F401  (imported for registration)
    bf16,
    broadcast,
    broadcast_like,
    conv,
    conv_transpose,
    dynamic,
    dynamic_axes,
    elemwise,
    elemwise_binary,
    image,
    nn,
    nn_activation,
    nn_norm,
    nn_spatial,
    pool,
    pool_adaptive,
    qnn,
    qnn_add,
    qnn_nn,
    reduce,
    reduce_sort,
    scatter,
    transform,
    transform_index,
    transform_join,
    vision,
    winograd,
)
from autorelay.op.registry import REQUIRED, NotReady, OpDef, OpPattern, all_ops, call, exists, get, register

__all__ = ["REQUIRED", "NotReady", "OpDef", "OpPattern", "all_ops", "call", "exists", "get", "register"]
