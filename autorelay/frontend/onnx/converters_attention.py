"""The transformer ops of opsets 23-24: Attention (scaled dot-product attention, with multi-, grouped-
and multi-query heads, a causal or given mask, softcapping and a key/value cache),
RotaryEmbedding (rotary position embedding, halves or interleaved, whole or partial) and
TensorScatter (a key/value cache's update).

Both are written with the IR ops the rest of a transformer uses (`nn.batch_matmul`, `nn.softmax`,
elementwise ops), so the compiler fuses and tunes them like the MatMul/Softmax chains older
exporters emit. The arithmetic is the ONNX reference's: Q and K are each scaled by sqrt(scale)
before their product; a boolean mask keeps where True; a mask shorter than the keys is padded
with "masked"; a causal mask lets query i see keys up to past + i; grouped K/V heads are repeated
head by head ([h0, h0, h1, h1, …]).
"""

from __future__ import annotations

import math

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar, required_input
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)

# The bias of a masked position: -inf, as ONNX's reference adds. (ONNX Runtime adds the lowest
# finite value instead: the softmax is 0 there either way; only a qk output with the mask in it,
# `qk_matmul_output_mode` 2, shows the difference.)
_MASKED = -np.inf


def _heads_first(g: GraphBuilder, node: NodeView, x: Expr, heads: int, what: str) -> Expr:
    """(B, S, heads * D) -> (B, heads, S, D); a 4-D input is already (B, heads, S, D)."""
    shape = g.static_shape(x, what)
    if len(shape) == 4:
        return x
    if len(shape) != 3 or heads < 1 or shape[2] % heads:
        raise node.fail(f"{what} must be 4-D, or 3-D with its hidden size a multiple of the head count "
                        f"({heads}); got shape {shape}")
    b, s, hidden = shape
    split = g.call("reshape", x, newshape=(b, s, heads, hidden // heads))
    return g.call("transpose", split, axes=(0, 2, 1, 3))


def _bmm(g: GraphBuilder, a: Expr, b: Expr, transpose_b: bool) -> Expr:
    """A product over the two leading (batch, head) axes of 4-D operands, as one batched matmul."""
    (n, h, m, k), bs = g.static_shape(a), g.static_shape(b)
    out = g.call("nn.batch_matmul", g.call("reshape", a, newshape=(n * h, m, k)),
                 g.call("reshape", b, newshape=(n * h, *bs[2:])), transpose_a=False, transpose_b=transpose_b)
    return g.call("reshape", out, newshape=(n, h, m, bs[2] if transpose_b else bs[3]))


def _mask_bias(g: GraphBuilder, node: NodeView, mask: Expr, like: Expr, total: int) -> Expr:
    """An attention mask as an additive bias: a bool mask is 0 where True and masked elsewhere; a
    float one is itself. One shorter than the keys is padded with masked positions."""
    neg_inf = g.scalar(_MASKED, like)
    if g.dtype(mask) == "bool":
        mask = g.call("where", mask, g.scalar(0.0, like), neg_inf)
    elif g.dtype(mask) != g.dtype(like):
        raise node.fail(f"attn_mask must be bool or {g.dtype(like)}, got {g.dtype(mask)}")
    shape = g.static_shape(mask, "attn_mask")
    if shape[-1] < total:
        width = tuple((0, 0) for _ in shape[:-1]) + ((0, total - shape[-1]),)
        mask = g.call("nn.pad", mask, neg_inf, pad_width=width)
    return mask


@_reg("Attention")
def _attention(g: GraphBuilder, node: NodeView) -> Expr | list[Expr]:
    q, k, v = _x(node, 0), _x(node, 1), _x(node, 2)
    mask, past_k, past_v = node.input(3), node.input(4), node.input(5)
    if node.input(6) is not None:
        raise node.fail("nonpad_kv_seqlen is not supported")
    if (past_k is None) != (past_v is None):
        raise node.fail("past_key and past_value come together, or neither")
    three_d = g.ndim(q) == 3
    q_heads, kv_heads = int(node.attr("q_num_heads", 0)), int(node.attr("kv_num_heads", 0))
    q = _heads_first(g, node, q, q_heads, "Q")
    k, v = _heads_first(g, node, k, kv_heads, "K"), _heads_first(g, node, v, kv_heads, "V")
    if past_k is not None:
        k = g.call("concatenate", g.tuple([past_k, k]), axis=2)
        v = g.call("concatenate", g.tuple([past_v, v]), axis=2)
    present_k, present_v = k, v
    (b, hq, lq, d), (_, hk, total, _) = g.static_shape(q, "Q"), g.static_shape(k, "K")
    past = g.static_shape(past_k, "past_key")[2] if past_k is not None else 0
    if hq != hk:
        if hq % hk:
            raise node.fail(f"{hq} query heads do not group over {hk} key/value heads")
        k = g.call("repeat", k, repeats=hq // hk, axis=1)
        v = g.call("repeat", v, repeats=hq // hk, axis=1)
    scale = float(node.attr("scale", 0.0)) or 1.0 / math.sqrt(d)
    root = g.scalar(math.sqrt(scale), q)
    raw = _bmm(g, g.call("multiply", q, root), g.call("multiply", k, root), transpose_b=True)  # (B, H, Lq, T)
    capped = raw
    softcap = float(node.attr("softcap", 0.0))
    if softcap > 0:
        capped = g.call("multiply", g.call("tanh", g.call("divide", raw, g.scalar(softcap, raw))),
                        g.scalar(softcap, raw))
    scores = capped
    if node.attr("is_causal", 0):
        rows, cols = np.arange(lq).reshape(-1, 1), np.arange(total).reshape(1, -1)
        causal = np.where(cols > past + rows, _MASKED, 0.0).astype(g.dtype(q))
        scores = g.call("add", scores, g.const(causal))
    if mask is not None:
        scores = g.call("add", scores, _mask_bias(g, node, mask, q, total))
    probs = g.call("nn.softmax", scores, axis=-1)
    y = _bmm(g, probs, v, transpose_b=False)  # (B, H, Lq, Dv)
    if three_d:
        y = g.call("reshape", g.call("transpose", y, axes=(0, 2, 1, 3)), newshape=(b, lq, -1))
    mode = int(node.attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise node.fail(f"qk_matmul_output_mode must be 0-3, got {mode}")
    qk = (raw, capped, scores, probs)[mode]
    return [y, present_k, present_v, qk][: max(1, node.num_outputs)]


@_reg("RotaryEmbedding")
def _rotary_embedding(g: GraphBuilder, node: NodeView) -> Expr:
    x, cos, sin, positions = _x(node, 0), _x(node, 1), _x(node, 2), node.input(3)
    shape = g.static_shape(x)
    if len(shape) == 4:  # (B, H, S, D) -> (B, S, H, D)
        x4 = g.call("transpose", x, axes=(0, 2, 1, 3))
    else:
        heads = int(node.attr("num_heads", 0))
        if len(shape) != 3 or heads < 1 or shape[2] % heads:
            raise node.fail(f"a 3-D input needs num_heads dividing its hidden size; got shape {shape}, "
                            f"num_heads {heads}")
        x4 = g.call("reshape", x, newshape=(shape[0], shape[1], heads, shape[2] // heads))
    bsz, seq, heads, head = g.static_shape(x4)
    rot = int(node.attr("rotary_embedding_dim", 0)) or head
    if rot % 2 or rot > head:
        raise node.fail(f"rotary_embedding_dim {rot} must be even and at most the head size {head}")
    if positions is not None:  # caches indexed by position: (max positions, rot / 2) -> (B, S, rot / 2)
        cos, sin = (g.call("take", c, positions, axis=0, mode="clip") for c in (cos, sin))
    if g.static_shape(cos, "cos_cache")[-1] != rot // 2:
        raise node.fail(f"the caches' last axis must be rotary_embedding_dim / 2 = {rot // 2}, "
                        f"got {g.shape(cos)}")
    cos, sin = (g.call("expand_dims", c, axis=2) for c in (cos, sin))  # (B, S, 1, rot / 2)

    def part(begin: int, end: int, step: int = 1) -> Expr:
        return g.call("strided_slice", x4, begin=(begin,), end=(end,), strides=(step,), axes=(3,))

    interleaved = bool(node.attr("interleaved", 0))
    x1, x2 = (part(0, rot, 2), part(1, rot, 2)) if interleaved else (part(0, rot // 2), part(rot // 2, rot))
    real = g.call("subtract", g.call("multiply", cos, x1), g.call("multiply", sin, x2))
    imag = g.call("add", g.call("multiply", sin, x1), g.call("multiply", cos, x2))
    if interleaved:
        rotated = g.call("reshape", g.call("stack", g.tuple([real, imag]), axis=4),
                         newshape=(bsz, seq, heads, rot))
    else:
        rotated = g.call("concatenate", g.tuple([real, imag]), axis=3)
    if rot < head:
        rotated = g.call("concatenate", g.tuple([rotated, part(rot, head)]), axis=3)
    if len(shape) == 4:
        return g.call("transpose", rotated, axes=(0, 2, 1, 3))
    return g.call("reshape", rotated, newshape=shape)


@_reg("TensorScatter")
def _tensor_scatter(g: GraphBuilder, node: NodeView) -> Expr:
    """A key/value cache update: the cache with `update`'s positions along the sequence axis written
    from each sample's write index (0 without `write_indices`; wrapping around in circular mode).
    Written as a gather from `update` and a select: cache position j of sample b reads update
    position j - w[b] (modulo the cache length when circular, the last such position when the
    update is longer than the cache) where that lies inside the update, the old cache elsewhere."""
    cache, update, written = _x(node, 0), _x(node, 1), node.input(2)
    shape, ushape = g.static_shape(cache, "past_cache"), g.static_shape(update, "update")
    rank = len(shape)
    axis = int(node.attr("axis", -2))
    axis = axis + rank if axis < 0 else axis
    if not 0 < axis < rank:
        raise node.fail(f"axis={node.attr('axis', -2)} must name a non-batch axis of a rank-{rank} cache")
    length, steps = shape[axis], ushape[axis]
    if len(ushape) != rank or any(a != b for k, (a, b) in enumerate(zip(shape, ushape)) if k != axis):
        raise node.fail(f"update {ushape} must match past_cache {shape} except along axis {axis}")
    mode = node.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise node.fail(f"mode must be linear or circular, got {mode!r}")
    along = [1] * rank
    along[axis] = length
    position = g.const(np.arange(length, dtype="int64").reshape(along))
    if written is None:
        offset = position
    else:
        per_sample = (shape[0],) + (1,) * (rank - 1)
        start = g.call("reshape", g.call("cast", written, dtype="int64"), newshape=per_sample)
        offset = g.call("subtract", position, start)
    if mode == "circular":
        offset = g.call("floor_mod", offset, g.const(np.int64(length)))
        # the update's last step that lands on this position, when it wraps more than once
        laps = g.call("floor_divide", g.call("subtract", g.const(np.int64(steps - 1)), offset),
                      g.const(np.int64(length)))
        offset = g.call("add", offset, g.call("multiply", laps, g.const(np.int64(length))))
    inside = g.call("logical_and", g.call("greater_equal", offset, g.const(np.int64(0))),
                    g.call("less", offset, g.const(np.int64(steps))))
    index = g.call("broadcast_to", g.call("clip", offset, a_min=0.0, a_max=float(steps - 1)), shape=shape)
    return g.call("where", inside, g.call("gather", update, index, axis=axis), cache)
