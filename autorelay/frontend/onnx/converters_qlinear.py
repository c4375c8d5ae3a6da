"""ONNX's integer convolution and matrix products as qnn ops: QLinearConv, ConvInteger, QLinearMatMul,
MatMulInteger and ONNX Runtime's QGemm (what its QOperator quantizer emits for Gemm).

Each becomes an int32 accumulator from `qnn.conv2d` / `qnn.dense` (so the int8 kernels run), plus
the int32 bias, plus `qnn.requantize` from the accumulator's real scale `x_scale * w_scale[oc]` to
the output's — the layer form Realize produces, which fuses into one kernel.

Forms ONNX allows and the qnn ops do not take directly are rewritten exactly, never refused:

* uint8 weights: shifted to int8 with their zero point (`w - zp` is unchanged);
* 1-d convolution: run as 2-d over a height of one;
* MatMul of N-d data by a constant matrix: the data flattened to rows for `qnn.dense`;
* a data zero point computed at run time (DynamicQuantizeLinear's): passed to the qnn op as the
  tensor it is;
* a product whose right operand is computed at run time (no `qnn.matmul` exists): exact
  arithmetic in float64 for MatMulInteger, dequantize -> float MatMul -> quantize for QLinearMatMul
  (correct to one quantisation step, as ONNX Runtime's own float reference is).

Rounding: `qnn.requantize`'s fixed point, half upward; ONNX Runtime rounds half to even in float,
so the two differ by at most one step, at exact ties.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar, required_input
from autorelay.frontend.onnx.converters_nn import auto_pads, matmul
from autorelay.frontend.onnx.qparams import (
    QParams,
    as_int8_weight,
    check_dtype,
    dequantize,
    product_scale,
    qparams,
    quantize,
)
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)
_UNIT = QParams(np.ones((), "float32"), np.zeros((), "int32"), "int8")  # integer ops carry no scale


def _requantize(g: GraphBuilder, acc: Expr, in_scale: np.ndarray, out: QParams, axis: int) -> Expr:
    scale = g.const(in_scale.reshape(()) if in_scale.size == 1 else in_scale, "float32")
    return g.call("qnn.requantize", acc, scale, g.const(np.zeros((), "int32")), out.scale_expr(g),
                  out.zp_expr(g), axis=axis, rounding="UPWARD", out_dtype=out.dtype)


# ---- convolution ---------------------------------------------------------------------------


def _conv_acc(g: GraphBuilder, node: NodeView, x: Expr, xq: QParams, w: Expr, wq: QParams,
              x_zp_run: Expr | None = None) -> Expr:
    """`qnn.conv2d`'s int32 accumulator of a quantised Conv (1-d or 2-d; NCHW / OIHW).

    `x_zp_run`: a data zero point computed at run time (DynamicQuantizeLinear's), for which
    `xq.zero_point` is 0: it is the op's zero point argument as it is (a scalar tensor)."""
    check_dtype(node, g.dtype(x), "data")
    check_dtype(node, g.dtype(w), "weight")
    if not xq.per_tensor:
        raise node.fail("the data's zero point and scale must be per tensor (scalars)")
    wshape = g.static_shape(w, "weight")
    nsp = len(wshape) - 2
    if nsp not in (1, 2) or g.ndim(x) != nsp + 2:
        raise node.fail(f"{nsp}-d convolution is not supported (only 1-d and 2-d; weight {wshape})")
    oc = int(wshape[0])
    for what, v in (("weight scale", wq.scale), ("weight zero point", wq.zero_point)):
        if v.size not in (1, oc):
            raise node.fail(f"{what} has {v.size} entries; expected 1 or one per output channel ({oc})")
    kernel = list(node.attr("kernel_shape", wshape[2:]))
    strides = list(node.attr("strides", [1] * nsp))
    dil = list(node.attr("dilations", [1] * nsp))
    pads = auto_pads(node, g.shape(x)[2:], kernel, strides, dil)
    if nsp == 1:  # over (1, L)
        x, w = g.call("expand_dims", x, axis=2), g.call("expand_dims", w, axis=2)
        kernel, strides, dil, pads = [1, *kernel], [1, *strides], [1, *dil], [0, pads[0], 0, pads[1]]
    w8, wzp = as_int8_weight(g, w, wq.zero_point)
    wq8 = QParams(wq.scale, wzp, "int8")
    attrs = dict(strides=tuple(strides), padding=tuple(pads), dilation=tuple(dil),
                 groups=int(node.attr("group", 1)), channels=oc, kernel_size=tuple(kernel), out_dtype="int32")
    x_zp = xq.zp_expr(g) if x_zp_run is None else g.call("cast", x_zp_run, dtype="int32")
    return g.call("qnn.conv2d", x, w8, x_zp, wq8.zp_expr(g), xq.scale_expr(g), wq8.scale_expr(g), **attrs)


def _spatial_back(g: GraphBuilder, y: Expr, nsp_in: int) -> Expr:
    return g.call("squeeze", y, axis=[2]) if nsp_in == 3 else y


@_reg("QLinearConv")
def _qlinear_conv(g: GraphBuilder, node: NodeView) -> Expr:
    x, w, b = _x(node, 0), _x(node, 3), node.input(8)
    xq = qparams(g, node, 1, 2, "x", g.dtype(x))
    wq = qparams(g, node, 4, 5, "w", g.dtype(w))
    yq = qparams(g, node, 6, 7, "y", g.dtype(x))
    check_dtype(node, yq.dtype, "output")
    acc = _conv_acc(g, node, x, xq, w, wq)
    if b is not None:
        if g.dtype(b) != "int32" or g.ndim(b) != 1:
            raise node.fail(f"bias must be a 1-d int32 tensor, got {g.dtype(b)} of rank {g.ndim(b)}")
        acc = g.call("nn.bias_add", acc, b, axis=1)
    return _spatial_back(g, _requantize(g, acc, product_scale(xq, wq), yq, axis=1), g.ndim(x))


@_reg("ConvInteger")
def _conv_integer(g: GraphBuilder, node: NodeView) -> Expr:
    x, w = _x(node, 0), _x(node, 1)
    xz, x_zp_run = _static_or_run(g, node, node.input(2), "x zero point")
    wq = QParams(_UNIT.scale, _zp(g, node.input(3), "w zero point"), g.dtype(w))
    xq = QParams(_UNIT.scale, xz, g.dtype(x))
    return _spatial_back(g, _conv_acc(g, node, x, xq, w, wq, x_zp_run), g.ndim(x))


def _zp(g: GraphBuilder, e: Expr | None, what: str) -> np.ndarray:
    return np.zeros((), "int32") if e is None else np.asarray(g.value(e, what)).astype("int32")


def _static_or_run(g: GraphBuilder, node: NodeView, e: Expr | None,
                   what: str) -> tuple[np.ndarray, Expr | None]:
    """A data zero point: (its value, None) when static, else (0, the per-tensor run-time value)."""
    if e is None or g.value_or_none(e) is not None:
        return _zp(g, e, what), None
    if int(np.prod(g.static_shape(e, what))) != 1:
        raise node.fail(f"a {what} computed at run time must be a scalar, got shape {g.shape(e)}")
    return np.zeros((), "int32"), g.call("reshape", e, newshape=())


# ---- matrix products -----------------------------------------------------------------------


def _dense_acc(g: GraphBuilder, node: NodeView, a: Expr, aq: QParams, w_nk: Expr, wq: QParams,
               a_zp_run: Expr | None = None) -> Expr:
    """`qnn.dense`'s int32 accumulator of rows `a` (any rank, K last; flattened to [M, K]) by a
    constant [N, K] weight; `a_zp_run`: A's zero point when computed at run time (a scalar)."""
    check_dtype(node, g.dtype(a), "A")
    check_dtype(node, g.dtype(w_nk), "B")
    n, k = g.static_shape(w_nk, "B")
    for what, v in (("B scale", wq.scale), ("B zero point", wq.zero_point)):
        if v.size not in (1, n):
            raise node.fail(f"{what} has {v.size} entries; expected 1 or one per column ({n})")
    rows = a if g.ndim(a) == 2 else g.call("reshape", a, newshape=(-1, k))
    w8, wzp = as_int8_weight(g, w_nk, wq.zero_point)
    wq8 = QParams(wq.scale, wzp, "int8")
    a_zp = aq.zp_expr(g) if a_zp_run is None else g.call("cast", a_zp_run, dtype="int32")
    acc = g.call("qnn.dense", rows, w8, a_zp, wq8.zp_expr(g), aq.scale_expr(g), wq8.scale_expr(g),
                 units=int(n), out_dtype="int32")
    return acc


def _unflatten(g: GraphBuilder, y: Expr, lead: tuple) -> Expr:
    if len(lead) == 1:
        return y
    if not lead:  # 1-d data: one row
        return g.call("reshape", y, newshape=(-1,))
    return g.call("reshape", y, newshape=(-1, *lead[1:], g.shape(y)[-1]))  # -1: a symbolic batch


def _const_matrix(g: GraphBuilder, b: Expr) -> np.ndarray | None:
    """B's value when it is a constant usable as a dense weight (a matrix, leading 1s allowed)."""
    v = g.value_or_none(b)
    if v is None or v.ndim < 2 or int(np.prod(v.shape[:-2])) != 1:
        return None
    return v.reshape(v.shape[-2:])


def _rows(g: GraphBuilder, a: Expr) -> Expr:
    return g.call("expand_dims", a, axis=0) if g.ndim(a) == 1 else a


@_reg("QLinearMatMul")
def _qlinear_matmul(g: GraphBuilder, node: NodeView) -> Expr:
    a, b = _x(node, 0), _x(node, 3)
    aq = qparams(g, node, 1, 2, "a", g.dtype(a))
    bq = qparams(g, node, 4, 5, "b", g.dtype(b))
    yq = qparams(g, node, 6, 7, "y", g.dtype(a))
    check_dtype(node, yq.dtype, "output")
    bv = _const_matrix(g, b)
    if bv is not None and aq.per_tensor and g.ndim(b) == 2:
        lead = g.shape(a)[:-1]
        acc = _dense_acc(g, node, _rows(g, a), aq, g.const(np.ascontiguousarray(bv.T)), bq)
        return _unflatten(g, _requantize(g, acc, product_scale(aq, bq), yq, axis=1), lead)
    # a run-time (or batched) B: the float product of the dequantised operands, quantised
    da = dequantize(g, a, aq, axis=max(g.ndim(a) - 2, 0))
    db = dequantize(g, b, bq, axis=-1)
    return quantize(g, matmul(g, da, db), yq)


@_reg("MatMulInteger")
def _matmul_integer(g: GraphBuilder, node: NodeView) -> Expr:
    """A zero point of A may be computed at run time (DynamicQuantizeLinear's, as ONNX Runtime's
    dynamic quantizer emits): it is then `qnn.dense`'s zero point argument as it is."""
    a, b = _x(node, 0), _x(node, 1)
    az, az_run = _static_or_run(g, node, node.input(2), "a zero point")
    bz = _zp(g, node.input(3), "b zero point")
    bv = _const_matrix(g, b)
    if bv is not None and az.size == 1 and g.ndim(b) == 2:
        lead = g.shape(a)[:-1]
        aq = QParams(_UNIT.scale, az, g.dtype(a))
        bq = QParams(_UNIT.scale, bz, g.dtype(b))
        acc = _dense_acc(g, node, _rows(g, a), aq, g.const(np.ascontiguousarray(bv.T)), bq, az_run)
        return _unflatten(g, acc, lead)
    # exact in float64: |products| < 2**16 and any realistic K keeps sums far below 2**53
    check_dtype(node, g.dtype(a), "A")
    check_dtype(node, g.dtype(b), "B")
    a_zp = (g.const(_row_zp(az, g.ndim(a)), "float64") if az_run is None
            else g.call("cast", az_run, dtype="float64"))
    fa = g.call("subtract", g.call("cast", a, dtype="float64"), a_zp)
    fb = g.call("subtract", g.call("cast", b, dtype="float64"), g.const(bz.reshape(-1) if bz.size > 1 else
                                                                         bz.reshape(()), "float64"))
    return g.call("cast", matmul(g, fa, fb), dtype="int32")


def _row_zp(zp: np.ndarray, ndim: int) -> np.ndarray:
    """A per-row zero point of A as a column that broadcasts along A's last axis."""
    return zp.reshape(()) if zp.size == 1 or ndim < 2 else zp.reshape(-1, 1)


@_reg("com.microsoft.QGemm")
def _qgemm(g: GraphBuilder, node: NodeView) -> Expr:
    """ONNX Runtime's QGemm: `alpha * A' B' + C` with C int32 at scale `alpha * a_scale * b_scale`;
    the output quantised when y_scale is given, float32 otherwise."""
    a, b, c = _x(node, 0), _x(node, 3), node.input(6)
    aq = qparams(g, node, 1, 2, "a", g.dtype(a))
    bq = qparams(g, node, 4, 5, "b", g.dtype(b))
    if not aq.per_tensor:
        raise node.fail("A's scale and zero point must be per tensor")
    bv = g.value_or_none(b)
    if bv is None or bv.ndim != 2 or g.ndim(a) != 2:
        raise node.fail("QGemm needs a 2-d A and a constant 2-d B")
    if node.attr("transA", 0):
        a = g.call("transpose", a, axes=(1, 0))
    w_nk = bv if node.attr("transB", 0) else np.ascontiguousarray(bv.T)
    acc = _dense_acc(g, node, a, aq, g.const(w_nk), bq)
    if c is not None:
        if g.dtype(c) != "int32":
            raise node.fail(f"C must be int32, got {g.dtype(c)}")
        n = w_nk.shape[0]
        acc = (g.call("nn.bias_add", acc, c, axis=1) if g.shape(c) == (n,)
               else g.call("add", acc, c))
    scale = product_scale(aq, bq, float(node.attr("alpha", 1.0)))
    if node.input(7) is None:  # float output
        acc_q = QParams(scale, np.zeros((), "int32"), "int32")
        return dequantize(g, acc, acc_q, axis=1)
    yq = qparams(g, node, 7, 8, "y", g.dtype(a))
    check_dtype(node, yq.dtype, "output")
    return _requantize(g, acc, scale, yq, axis=1)
