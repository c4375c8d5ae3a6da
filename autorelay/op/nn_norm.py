"""Normalisations: `nn.batch_norm`, `nn.layer_norm`, `nn.lrn` (+ its gradient helper `nn.lrn_grad`).

`nn.batch_norm` has Relay's inference semantics: it normalises with the *moving* statistics it is
given and returns the 3-tuple `(result, moving_mean, moving_var)` (field 0 is what models use;
`simplify_inference` later turns it into a scale and a shift). Its gradient is the gradient of that
formula with respect to all five inputs, so the moving statistics can be learned too.
`nn.layer_norm` computes its statistics over `axis` (biased variance), like Relay.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr, TupleGetItem
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.op.nn import along_axis, attrs_axis, channel_vectors, mul, scalar, static_shape, sum_except
from autorelay.op.nn_activation import float_arg
from autorelay.op.registry import OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import normalize_axis, tensor_arg

_NORM_ATTRS = {"epsilon": 1e-5, "center": True, "scale": True}


def _batch_norm_rel(arg_types: list[Type], attrs: Attrs) -> Any:
    op = "nn.batch_norm"
    data = float_arg(op, arg_types, 0, "data")
    axis = normalize_axis(op, attrs["axis"], len(data.shape))
    names = {1: "gamma", 2: "beta", 3: "moving_mean", 4: "moving_var"}
    refined = channel_vectors(op, arg_types, names, data, axis)
    vec = TensorType((data.shape[axis],), data.dtype)
    out = TupleType((data, vec, vec))
    return (refined, out) if refined else out


def _bcast(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    return v.reshape((-1,) + (1,) * (ndim - axis - 1))


def _batch_norm_ref(attrs: Attrs, x, gamma, beta, mean, var):
    axis = attrs["axis"] % x.ndim
    inv = 1.0 / np.sqrt(var.astype(np.float64) + attrs["epsilon"])
    scale = inv * gamma if attrs["scale"] else inv
    shift = beta if attrs["center"] else np.zeros_like(mean)
    y = (x - _bcast(mean, axis, x.ndim)) * _bcast(scale, axis, x.ndim) + _bcast(shift, axis, x.ndim)
    return y.astype(x.dtype), mean.copy(), var.copy()


def _batch_norm_grad(c: Call, g: Expr) -> list[Expr]:
    x, gamma, beta, mean, var = c.args
    ndim = len(static_shape("nn.batch_norm", x))
    axis = attrs_axis(c, ndim)
    g0, g1, g2 = (TupleGetItem(g, i) for i in range(3))
    inv = call("rsqrt", call("add", var, scalar(var, c.attrs["epsilon"])))
    gam = gamma if c.attrs["scale"] else call("ones_like", gamma)
    centered = call("subtract", x, along_axis(mean, axis, ndim))
    g_sum = sum_except(g0, axis)
    g_dot = sum_except(mul(g0, centered), axis)
    dx = mul(g0, along_axis(mul(gam, inv), axis, ndim))
    dgamma = mul(g_dot, inv) if c.attrs["scale"] else call("zeros_like", gamma)
    dbeta = g_sum if c.attrs["center"] else call("zeros_like", beta)
    dmean = call("subtract", g1, mul(g_sum, gam, inv))
    dvar = call("add", g2, mul(g_dot, gam, scalar(var, -0.5), inv, inv, inv))
    return [dx, dgamma, dbeta, dmean, dvar]


def _batch_norm_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """Inference formula: (x - mean) * rsqrt(var + eps) * gamma + beta per channel of `axis`; the
    moving statistics pass through as fields 1 and 2."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E

    x, gamma, beta, mean, var = inputs
    tc.check_dtypes(inputs, ("float32", "float64"))
    axis = attrs["axis"] % x.ndim
    eps = E.const(attrs["epsilon"], x.dtype)

    def body(*i: E.Expr) -> E.Expr:
        c = i[axis]
        scale = E.const(1.0, x.dtype) / E.call("sqrt", var[c] + eps)
        y = (x[i] - mean[c]) * (scale * gamma[c] if attrs["scale"] else scale)
        return y + beta[c] if attrs["center"] else y

    return [tc.compute0(x.shape, body, "batch_norm", tag="elemwise"),
            tc.map_tensor(mean, lambda v: v, "bn_mean"), tc.map_tensor(var, lambda v: v, "bn_var")]


register(OpDef(
    name="nn.batch_norm",
    compute=_batch_norm_compute,
    arg_names=("data", "gamma", "beta", "moving_mean", "moving_var"),
    type_rel=_batch_norm_rel,
    pattern=OpPattern.OPAQUE,
    attrs={"axis": 1, **_NORM_ATTRS},
    reference=_batch_norm_ref,
    gradient=_batch_norm_grad,
    doc="(x - mean) / sqrt(var + eps) * gamma + beta along `axis`; returns (result, mean, var).",
))


def _layer_norm_rel(arg_types: list[Type], attrs: Attrs) -> Any:
    op = "nn.layer_norm"
    data = float_arg(op, arg_types, 0, "data")
    axis = normalize_axis(op, attrs["axis"], len(data.shape))
    refined = channel_vectors(op, arg_types, {1: "gamma", 2: "beta"}, data, axis)
    return (refined, data) if refined else data


def _layer_norm_ref(attrs: Attrs, x, gamma, beta):
    axis = attrs["axis"] % x.ndim
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=axis, keepdims=True)
    var = ((x64 - mu) ** 2).mean(axis=axis, keepdims=True)
    y = (x64 - mu) / np.sqrt(var + attrs["epsilon"])
    if attrs["scale"]:
        y = y * _bcast(gamma, axis, x.ndim)
    if attrs["center"]:
        y = y + _bcast(beta, axis, x.ndim)
    return y.astype(x.dtype)


def _layer_norm_grad(c: Call, g: Expr) -> list[Expr]:
    x, gamma, beta = c.args
    ndim = len(static_shape("nn.layer_norm", x))
    axis = attrs_axis(c, ndim)

    def mean(e: Expr) -> Expr:
        return call("mean", e, axis=[axis], keepdims=True)

    centered = call("subtract", x, mean(x))
    inv = call("rsqrt", call("add", mean(mul(centered, centered)), scalar(x, c.attrs["epsilon"])))
    xhat = mul(centered, inv)
    dxhat = mul(g, along_axis(gamma, axis, ndim)) if c.attrs["scale"] else g
    # d/dx of the normalisation: inv * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    dx = mul(inv, call("subtract", call("subtract", dxhat, mean(dxhat)), mul(xhat, mean(mul(dxhat, xhat)))))
    dgamma = sum_except(mul(g, xhat), axis) if c.attrs["scale"] else call("zeros_like", gamma)
    dbeta = sum_except(g, axis) if c.attrs["center"] else call("zeros_like", beta)
    return [dx, dgamma, dbeta]


def _layer_norm_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """(x - mean) / sqrt(var + eps) * gamma + beta with row statistics over `axis` (kept as extent 1)."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E
    from autorelay.te import tensor as te

    x, gamma, beta = inputs
    tc.check_dtypes([x], ("float32", "float64"))
    axis = attrs["axis"] % x.ndim
    n = x.shape[axis]
    stat = TensorType(tuple(1 if d == axis else s for d, s in enumerate(x.shape)), x.dtype)
    inv_n = E.const(1.0 / n, x.dtype)
    total = tc.reduction(x, "sum", [axis], True, stat, name="ln_sum")

    def at(i: tuple) -> tuple:
        return tuple(0 if d == axis else v for d, v in enumerate(i))

    sq = tc.reduction(x, "sum", [axis], True, stat, name="ln_sqsum",
                      body=lambda v, i: (v - total[at(i)] * inv_n) * (v - total[at(i)] * inv_n))

    def body(*i: E.Expr) -> E.Expr:
        mu = total[at(i)] * inv_n
        y = (x[i] - mu) / E.call("sqrt", sq[at(i)] * inv_n + E.const(attrs["epsilon"], x.dtype))
        if attrs["scale"]:
            y = y * gamma[i[axis]]
        if attrs["center"]:
            y = y + beta[i[axis]]
        return y

    return te.compute(x.shape, body, name="layer_norm")


register(OpDef(
    name="nn.layer_norm",
    arg_names=("data", "gamma", "beta"),
    type_rel=_layer_norm_rel,
    pattern=OpPattern.OPAQUE,
    attrs={"axis": -1, **_NORM_ATTRS},
    reference=_layer_norm_ref,
    gradient=_layer_norm_grad,
    compute=_layer_norm_compute,
    doc="Normalise over `axis` with the data's own mean and (biased) variance, then scale and shift.",
))


# ---------------------------------------------------------------------------------------------
# local response normalisation across channels


def _lrn_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    data = float_arg("nn.lrn", arg_types, 0, "data")
    normalize_axis("nn.lrn", attrs["axis"], len(data.shape))
    if not isinstance(attrs["size"], int) or attrs["size"] <= 0:
        raise rel_error("nn.lrn", f"size must be a positive integer, got {attrs['size']!r}")
    return data


def _window_sum(v: np.ndarray, axis: int, lo: int, hi: int) -> np.ndarray:
    """out[c] = sum of v[c - lo .. c + hi] along `axis`, zero outside."""
    n = v.shape[axis]
    moved = np.moveaxis(v, axis, 0)
    padded = np.concatenate([np.zeros((lo,) + moved.shape[1:]), moved, np.zeros((hi,) + moved.shape[1:])])
    out = sum(padded[i: i + n] for i in range(lo + hi + 1))
    return np.moveaxis(out, 0, axis)


def _lrn_denominator(attrs: Attrs, x: np.ndarray) -> tuple[np.ndarray, int]:
    axis, size = attrs["axis"] % x.ndim, attrs["size"]
    sq = _window_sum(x.astype(np.float64) ** 2, axis, size // 2, (size - 1) // 2)
    return attrs["bias"] + attrs["alpha"] / size * sq, axis


def _lrn_ref(attrs: Attrs, x: np.ndarray) -> np.ndarray:
    d, _ = _lrn_denominator(attrs, x)
    return (x / d ** attrs["beta"]).astype(x.dtype)


def _lrn_grad_ref(attrs: Attrs, g: np.ndarray, x: np.ndarray) -> np.ndarray:
    d, axis = _lrn_denominator(attrs, x)
    size, beta = attrs["size"], attrs["beta"]
    inner = g * x * d ** (-beta - 1.0)
    # channel k appears in the windows of channels k - (size-1)//2 .. k + size//2
    spread = _window_sum(inner, axis, (size - 1) // 2, size // 2)
    return (g * d ** (-beta) - 2.0 * beta * attrs["alpha"] / size * x * spread).astype(g.dtype)


_LRN_ATTRS = {"size": 5, "axis": 1, "bias": 2.0, "alpha": 1e-5, "beta": 0.75}

def _lrn_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """x / (bias + alpha / size * window_sum(x^2)) ** beta; the window over `axis` is a reduction of
    `size` taps centred as in the reference (size // 2 before), reading zero outside the axis."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E
    from autorelay.te import tensor as te

    x = inputs[0]
    tc.check_dtypes([x], ("float32", "float64"))
    axis, size = attrs["axis"] % x.ndim, attrs["size"]
    n = x.shape[axis]
    r = te.reduce_axis(size, "rw")

    def window(*i: E.Expr) -> E.Expr:
        ch = i[axis] + r.var - size // 2
        v = x[tuple(E.maximum(E.minimum(ch, n - 1), 0) if d == axis else j for d, j in enumerate(i))]
        return te.sum(E.select(E.all_of(ch >= 0, ch < n), v * v, E.const(0.0, x.dtype)), r)

    sq = te.compute(x.shape, window, name="lrn_sqsum", tag="reduce")

    def body(*i: E.Expr) -> E.Expr:
        d = E.const(attrs["bias"], x.dtype) + E.const(attrs["alpha"] / size, x.dtype) * sq[i]
        return x[i] * E.call("pow", d, E.const(-attrs["beta"], x.dtype))

    return te.compute(x.shape, body, name="lrn")


register(OpDef(
    name="nn.lrn",
    compute=_lrn_compute,
    arg_names=("data",),
    type_rel=_lrn_rel,
    pattern=OpPattern.OPAQUE,
    attrs=dict(_LRN_ATTRS),
    reference=_lrn_ref,
    gradient=lambda c, g: [call("nn.lrn_grad", g, c.args[0], **dict(c.attrs))],
    doc="x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels) ** beta.",
))


def _lrn_grad_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    g = tensor_arg("nn.lrn_grad", arg_types, 0, "out_grad")
    data = _lrn_rel(arg_types[1:], attrs)
    if g != data:
        raise rel_error("nn.lrn_grad", f"out_grad {g} must have the type of data {data}")
    return data


register(OpDef(
    name="nn.lrn_grad",
    arg_names=("out_grad", "data"),
    type_rel=_lrn_grad_rel,
    pattern=OpPattern.OPAQUE,
    attrs=dict(_LRN_ATTRS),
    reference=_lrn_grad_ref,
    doc="Gradient of nn.lrn with respect to its data (helper for the gradient rule).",
))
