"""Neural-network layer converters: Conv, ConvTranspose, Gemm, MatMul, BatchNormalization, Dropout.

Only 1-d and 2-d convolutions exist in the IR: 3-d Conv and ConvTranspose are rewritten as 2-d
ones in `converters_volume.py`. Pooling (which reuses `auto_pads`) lives in `converters_pool.py`.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar, required_input
from autorelay.frontend.onnx.converters_volume import conv3d, conv3d_transpose
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)


def auto_pads(
    node: NodeView, in_sizes: tuple[int, ...], kernel: list[int], strides: list[int], dilations: list[int]
) -> list[int]:
    """Explicit `(begins…, ends…)` pads for `auto_pad` (or the `pads` attribute when NOTSET)."""
    mode = node.attr("auto_pad", "NOTSET")
    n = len(kernel)
    if mode in ("NOTSET", ""):
        pads = list(node.attr("pads", [0] * (2 * n)))
        if len(pads) != 2 * n:
            raise node.fail(f"pads={pads} must have {2 * n} entries for {n} spatial axes")
        return pads
    if mode == "VALID":
        return [0] * (2 * n)
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise node.fail(f"auto_pad={mode!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    begins, ends = [], []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
        if not isinstance(size, int):
            raise node.fail(f"auto_pad={mode} needs static spatial extents, got {in_sizes}")
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else big)
        ends.append(big if mode == "SAME_UPPER" else small)
    return begins + ends


# ---- convolution ---------------------------------------------------------------------------


@_reg("Conv")
def _conv(g: GraphBuilder, node: NodeView) -> Expr:
    x, w, b = _x(node, 0), _x(node, 1), node.input(2)
    wshape = g.static_shape(w, "weight")
    nsp = len(wshape) - 2
    if nsp not in (1, 2, 3):
        raise node.fail(f"{nsp}-d convolution is not supported (only 1-d, 2-d and 3-d; weight {wshape})")
    kernel = list(node.attr("kernel_shape", wshape[2:]))
    strides = list(node.attr("strides", [1] * nsp))
    dil = list(node.attr("dilations", [1] * nsp))
    pads = auto_pads(node, g.shape(x)[2:], kernel, strides, dil)
    window = dict(strides=tuple(strides), padding=tuple(pads), dilation=tuple(dil),
                  groups=int(node.attr("group", 1)), channels=int(wshape[0]), kernel_size=tuple(kernel))
    if nsp == 3:
        y = conv3d(g, x, w, window)
    else:
        y = g.call("nn.conv1d" if nsp == 1 else "nn.conv2d", x, w, **window)
    return y if b is None else g.call("nn.bias_add", y, b, axis=1)


@_reg("ConvTranspose")
def _conv_transpose(g: GraphBuilder, node: NodeView) -> Expr:
    x, w, b = _x(node, 0), _x(node, 1), node.input(2)
    wshape = g.static_shape(w, "weight")
    nsp = len(wshape) - 2
    if nsp not in (1, 2, 3):
        raise node.fail(f"{nsp}-d transposed convolution is not supported (only 1-d, 2-d and 3-d)")
    groups = int(node.attr("group", 1))
    kernel = list(node.attr("kernel_shape", wshape[2:]))
    strides = list(node.attr("strides", [1] * nsp))
    dil = list(node.attr("dilations", [1] * nsp))
    out_pad = list(node.attr("output_padding", [0] * nsp))
    output_shape = node.attr("output_shape")
    mode = node.attr("auto_pad", "NOTSET")
    if output_shape is not None or mode in ("SAME_UPPER", "SAME_LOWER"):  # pads from the input's extents
        in_sizes = g.static_shape(x)[2:]
        full = [s * (i - 1) + op + (k - 1) * d + 1
                for i, s, op, k, d in zip(in_sizes, strides, out_pad, kernel, dil)]
        target = (
            list(output_shape)[-nsp:]
            if output_shape is not None
            else [i * s for i, s in zip(in_sizes, strides)]
        )
        begins, ends = [], []
        for k, (f, t) in enumerate(zip(full, target)):
            total = f - t
            if total < 0:  # a larger output than the full one: the extra rows are output padding
                out_pad[k] -= total
                total = 0
            upper = mode != "SAME_LOWER"
            begins.append(total // 2 if upper else total - total // 2)
            ends.append(total - begins[-1])
        pads = begins + ends
    elif mode == "VALID":
        pads = [0] * (2 * nsp)
    else:
        pads = list(node.attr("pads", [0] * (2 * nsp)))
    window = dict(
        strides=tuple(strides),
        padding=tuple(pads),
        dilation=tuple(dil),
        groups=groups,
        channels=int(wshape[1]) * groups,
        kernel_size=tuple(kernel),
        output_padding=tuple(out_pad),
    )
    if nsp == 3:
        y = conv3d_transpose(g, x, w, window)
    else:
        y = g.call("nn.conv1d_transpose" if nsp == 1 else "nn.conv2d_transpose", x, w, **window)
    return y if b is None else g.call("nn.bias_add", y, b, axis=1)


# ---- matrix products -----------------------------------------------------------------------


@_reg("Gemm")
def _gemm(g: GraphBuilder, node: NodeView) -> Expr:
    a, b, c = _x(node, 0), _x(node, 1), node.input(2)
    ta, tb = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    if g.ndim(a) != 2 or g.ndim(b) != 2:
        raise node.fail(f"A {g.shape(a)} and B {g.shape(b)} must be matrices")
    y = (
        g.call("nn.dense", a, b)
        if tb and not ta
        else g.call("nn.matmul", a, b, transpose_a=ta, transpose_b=tb)
    )
    if alpha != 1.0:
        y = g.call("multiply", y, g.scalar(alpha, y))
    if c is not None and beta != 0.0:
        cc = c if beta == 1.0 else g.call("multiply", c, g.scalar(beta, c))
        if g.ndim(c) == 1 and beta == 1.0:
            y = (
                g.call("nn.bias_add", y, cc, axis=-1)
                if g.shape(c)[0] == g.shape(y)[1]
                else g.call("add", y, cc)
            )
        else:
            y = g.call("add", y, cc)
    return y


@_reg("MatMul")
def _matmul(g: GraphBuilder, node: NodeView) -> Expr:
    return matmul(g, _x(node, 0), _x(node, 1))


def matmul(g: GraphBuilder, a: Expr, b: Expr) -> Expr:
    """NumPy `matmul` semantics (1-d promotion, broadcast batch axes) from nn.matmul / batch_matmul."""
    ra, rb = g.ndim(a), g.ndim(b)
    if ra == 0 or rb == 0:
        raise g.fail("MatMul operands must have rank >= 1")
    if ra == 1:
        return g.call("squeeze", matmul(g, g.call("expand_dims", a, axis=0), b), axis=[-2 if rb > 1 else 0])
    if rb == 1:
        return g.call("squeeze", matmul(g, a, g.call("expand_dims", b, axis=1)), axis=[-1])
    if rb == 2:
        return _weight_product(g, a, b)
    if (same := _same_dynamic_batch(g, a, b)) is not None:
        return same
    sa, sb = g.static_shape(a, "A"), g.static_shape(b, "B")
    try:
        batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    except ValueError:
        raise g.fail(f"MatMul batch axes of A {sa} and B {sb} do not broadcast") from None
    nb = int(np.prod(batch)) if batch else 1
    if int(np.prod(sb[:-2])) == 1 and sa[:-2] == batch:  # one B for every batch: x @ W
        return _weight_product(g, a, g.call("reshape", b, newshape=sb[-2:]), weight=b)

    def as3(e: Expr, s: tuple[int, ...]) -> Expr:
        if int(np.prod(s[:-2])) == 1:  # batch_matmul broadcasts a batch of 1: no copies
            return g.call("reshape", e, newshape=(1,) + s[-2:])
        full = batch + s[-2:]
        if s != full:
            e = g.call("broadcast_to", e, shape=full)
        return g.call("reshape", e, newshape=(nb,) + s[-2:])

    y = g.call("nn.batch_matmul", as3(a, sa), as3(b, sb), transpose_b=False)
    return g.call("reshape", y, newshape=batch + (sa[-2], sb[-1]))


def _weight_product(g: GraphBuilder, a: Expr, b: Expr, weight: Expr | None = None) -> Expr:
    """`a @ b` for a matrix `b`. When `b` is (a reshape of) an initializer, a layer's weight as
    PyTorch exports `nn.Linear` on 3-d activations, it is the dense layer it is, `nn.dense(a, b.T)`
    (the transpose folds when the weights are bound): the quantizer sees it as a layer, and the
    build would have rewritten it so anyway (`MatmulToDense`)."""
    if id(weight if weight is not None else b) in g.init_values:
        return g.call("nn.dense", a, g.call("transpose", b, axes=(1, 0)))
    return g.call("nn.matmul", a, b)


def _same_dynamic_batch(g: GraphBuilder, a: Expr, b: Expr) -> Expr | None:
    """A product of operands with the same batch axes where some extent is dynamic: an exported
    attention's (batch, heads, seq, d) with a dynamic batch or sequence. Both operands are flattened
    to one batch axis for `nn.batch_matmul` (Relay's reshape codes merge and split axes whatever
    their extents) and the result unflattened. None when the shapes are static, or the batch axes
    differ or hold more than one dynamic extent (those take the general path)."""
    sa, sb = g.shape(a), g.shape(b)
    pattern = [d if isinstance(d, int) else None for d in sa[:-2]]
    if len(sa) != len(sb) or pattern != [d if isinstance(d, int) else None for d in sb[:-2]]:
        return None  # (dynamic extents, named alike or not, must agree at run time)
    if pattern.count(None) > 1 or all(isinstance(d, int) for d in (*sa, *sb)):
        return None
    flat_a, flat_b = _merge_batch(g, a, len(pattern)), _merge_batch(g, b, len(pattern))
    y = g.call("nn.batch_matmul", flat_a, flat_b, transpose_b=False)
    for i in range(len(pattern) - 1):  # split the leading axis back into the batch extents
        rest = pattern[i + 1:]
        head = (pattern[i], -1) if pattern[i] is not None else (-1, int(np.prod(rest)))
        y = g.call("reshape", y, newshape=(*(0,) * i, -4, *head, -2))
    return y


def _merge_batch(g: GraphBuilder, x: Expr, axes: int) -> Expr:
    """x with its leading `axes` axes merged into one (one added when there are none)."""
    if axes == 0:
        return g.call("expand_dims", x, axis=0)
    for _ in range(axes - 1):
        x = g.call("reshape", x, newshape=(-3, -2))
    return x


# ---- normalisation, dropout ----------------------------------------------------------------


@_reg("BatchNormalization")
def _batch_norm(g: GraphBuilder, node: NodeView) -> Expr:
    if node.attr("spatial", 1) != 1:
        raise node.fail("spatial=0 (per-activation statistics, opset < 9) is not supported")
    if node.attr("training_mode", 0):
        return _batch_norm_training(g, node)
    if node.num_outputs > 1 and any(node.output_names[1:]):
        raise node.fail("the running mean/var outputs need training_mode=1")
    x = _x(node, 0)
    args = [_x(node, i) for i in range(1, 5)]
    bn = g.call("nn.batch_norm", x, *args, axis=1, epsilon=float(node.attr("epsilon", 1e-5)))
    return g.item(bn, 0)


def _batch_norm_training(g: GraphBuilder, node: NodeView) -> list[Expr | None]:
    """Normalise with the batch's own statistics; also return the updated running statistics."""
    x, scale, bias, run_mean, run_var = (_x(node, i) for i in range(5))
    ndim = g.ndim(x)
    axes = [0] + list(range(2, ndim))
    eps, momentum = float(node.attr("epsilon", 1e-5)), float(node.attr("momentum", 0.9))
    mean = g.call("mean", x, axis=axes, keepdims=True)
    var = g.call("variance", x, mean, axis=axes, keepdims=True)
    inv = g.call("rsqrt", g.call("add", var, g.scalar(eps, var)))

    def channel(v: Expr) -> Expr:  # (C,) -> (C, 1, …) to broadcast against (N, C, …)
        return g.call("expand_dims", v, axis=1, num_newaxis=ndim - 2) if ndim > 2 else v

    y = g.call("multiply", g.call("subtract", x, mean), inv)
    y = g.call("add", g.call("multiply", y, channel(scale)), channel(bias))
    flat_mean = g.call("reshape", mean, newshape=(-1,))
    flat_var = g.call("reshape", var, newshape=(-1,))

    def blend(running: Expr, current: Expr) -> Expr:
        kept = g.call("multiply", running, g.scalar(momentum, running))
        return g.call("add", kept, g.call("multiply", current, g.scalar(1.0 - momentum, current)))

    return [y, blend(run_mean, flat_mean), blend(run_var, flat_var)]


@_reg("Dropout")
def _dropout(g: GraphBuilder, node: NodeView) -> list[Expr | None]:
    x = _x(node, 0)
    training = node.input(2)
    ratio = node.input(1)
    rate = 0.5 if ratio is None else float(np.asarray(g.value(ratio, "ratio")).reshape(()))
    if (
        training is not None
        and bool(np.asarray(g.value(training, "training_mode")).reshape(()))
        and rate != 0
    ):
        raise node.fail("training_mode=true with a non-zero ratio (random dropout) is not supported")
    outs: list[Expr | None] = [x]
    if node.num_outputs > 1:
        outs.append(g.const(np.ones(g.static_shape(x), dtype=bool)))
    return outs
