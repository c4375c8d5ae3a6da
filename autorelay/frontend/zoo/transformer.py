"""A transformer encoder layer: multi-head self-attention through batch_matmul + softmax, then a
feed-forward block, each with a residual connection and layer norm (post-norm, as in the original).
"""

from __future__ import annotations

import math

from autorelay.frontend.zoo.builder import NetBuilder
from autorelay.ir.expr import Expr, const
from autorelay.op.registry import call


def _layer_norm(b: NetBuilder, x: Expr, name: str, d: int) -> Expr:
    gamma = b.weight(f"{name}_gamma", (d,), "ones")
    beta = b.weight(f"{name}_beta", (d,), "zeros")
    return call("nn.layer_norm", x, gamma, beta, axis=-1, epsilon=1e-5)


def transformer_encoder(batch_size: int = 1, dtype: str = "float32", seq_len: int = 32,
                        d_model: int = 128, heads: int = 4, d_ff: int = 512, seed: int = 0):
    if d_model % heads:
        raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
    b = NetBuilder(seed, dtype)
    bsz, t, d, h, dh = batch_size, seq_len, d_model, heads, d_model // heads
    data = b.input("data", (bsz, t, d))
    flat = call("reshape", data, newshape=(bsz * t, d))

    def heads_of(name: str) -> Expr:
        y = b.dense(flat, name, d, d)                                   # (b*t, d)
        y = call("reshape", y, newshape=(bsz, t, h, dh))
        y = call("transpose", y, axes=(0, 2, 1, 3))                    # (b, h, t, dh)
        return call("reshape", y, newshape=(bsz * h, t, dh))

    q, k, v = heads_of("query"), heads_of("key"), heads_of("value")
    scores = call("nn.batch_matmul", q, k, transpose_b=True)           # (b*h, t, t)
    scores = call("multiply", scores, const(1.0 / math.sqrt(dh), dtype))
    attn = call("nn.softmax", scores, axis=-1)
    ctx = call("nn.batch_matmul", attn, v, transpose_b=False)          # (b*h, t, dh)
    ctx = call("reshape", ctx, newshape=(bsz, h, t, dh))
    ctx = call("transpose", ctx, axes=(0, 2, 1, 3))
    ctx = call("reshape", ctx, newshape=(bsz * t, d))
    out = b.dense(ctx, "attn_out", d, d)
    x = _layer_norm(b, call("add", flat, out), "ln1", d)
    ff = call("nn.relu", b.dense(x, "ff1", d, d_ff))
    ff = b.dense(ff, "ff2", d_ff, d)
    y = _layer_norm(b, call("add", x, ff), "ln2", d)
    return b.finish([data], call("reshape", y, newshape=(bsz, t, d)))
