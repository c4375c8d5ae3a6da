"""Elementwise unary operators (`exp`, `sigmoid`, `floor`, `isnan`, …) and the dtype tables and
gradient helpers the other op families share; the broadcasting binary operators (`add`, `less`,
`logical_and`, …) live in `elemwise_binary`.

Families of near-identical ops are registered by a small factory so that each op is still one
`OpDef` but its rules are a row in a table, not a copy-pasted block.

Dtype rules (Relay's): results keep the argument's dtype (predicates such as `isnan` return
`bool`) and integer ops stay integer:

* `round` rounds half to even (LLVM's `nearbyint` under the default rounding mode, as TVM lowers
  it, and NumPy's `round`).
* Transcendental ops (`exp`, `log`, `tanh`, …) require a float dtype; `logical_*` require bool.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Constant, Expr, const
from autorelay.ir.types import TensorType, Type
from autorelay.op.registry import OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import tensor_arg
from autorelay.op.te_compute import Unsupported, unary
from autorelay.te import expr as E

FLOAT = ("float16", "float32", "float64")
INT = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMERIC = FLOAT + INT
BOOL = ("bool",)
ANY_DTYPE = NUMERIC + BOOL


def scalar_like(like: Expr, value: float) -> Constant:
    """A scalar constant with the dtype of an already-typed expression (for gradient rules)."""
    return const(np.array(value, dtype=like.checked_type.dtype))


def sum_to(grad: Expr, like: Expr) -> Expr:
    """Undo broadcasting in a gradient: sum `grad` down to the shape of `like`."""
    return call("collapse_sum_like", grad, like)


def check_dtype(op: str, t: TensorType, allowed: tuple[str, ...], name: str) -> None:
    if t.dtype not in allowed:
        kind = {FLOAT: "a float", INT: "an integer", NUMERIC: "a numeric", BOOL: "a bool"}.get(
            allowed, "one of " + ", ".join(allowed)
        )
        raise rel_error(op, f"argument {name} must have {kind} dtype, got {t.dtype} (shape {t.shape})")


def as_array(value: object, dtype: np.dtype) -> np.ndarray:
    """References return arrays (never NumPy scalars) of the op's declared dtype."""
    return np.asarray(value).astype(dtype, copy=False)


# --------------------------------------------------------------------------------------------
# Unary ops
# --------------------------------------------------------------------------------------------

# grad(x, y, g) -> gradient of x, where y is the forward call (reusing it avoids recomputation).
UnaryGrad = Callable[[Expr, Expr, Expr], Expr]


@dataclass(frozen=True)
class _Unary:
    name: str
    fn: Callable[[np.ndarray], np.ndarray]
    grad: UnaryGrad | None
    dtypes: tuple[str, ...] = FLOAT
    doc: str = ""
    out_dtype: str | None = None  # None: the argument's dtype


def _zero_grad(x: Expr, y: Expr, g: Expr) -> Expr:
    return call("zeros_like", x)


def mul(*xs: Expr) -> Expr:
    """`multiply` chained over several factors (gradient rules are products of many terms)."""
    out = xs[0]
    for x in xs[1:]:
        out = call("multiply", out, x)
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _sign(x: np.ndarray) -> np.ndarray:
    return np.sign(x) if x.dtype.kind != "u" else (x > 0).astype(x.dtype)


_UNARY = [
    _Unary("negative", np.negative, lambda x, y, g: call("negative", g), NUMERIC),
    _Unary("abs", np.abs, lambda x, y, g: mul(g, call("sign", x)), NUMERIC),
    _Unary("exp", np.exp, lambda x, y, g: mul(g, y)),
    _Unary("log", np.log, lambda x, y, g: call("divide", g, x)),
    _Unary("sqrt", np.sqrt, lambda x, y, g: call("divide", g, mul(scalar_like(x, 2.0), y))),
    _Unary(
        "rsqrt",
        lambda x: 1.0 / np.sqrt(x),
        # d/dx x^(-1/2) = -1/2 * x^(-1/2) / x
        lambda x, y, g: mul(g, scalar_like(x, -0.5), call("divide", y, x)),
    ),
    _Unary(
        "tanh",
        np.tanh,
        lambda x, y, g: mul(g, call("subtract", scalar_like(x, 1.0), mul(y, y))),
    ),
    _Unary(
        "sigmoid",
        _sigmoid,
        lambda x, y, g: mul(g, y, call("subtract", scalar_like(x, 1.0), y)),
    ),
    _Unary(
        "erf",
        special.erf,
        lambda x, y, g: mul(
            g, scalar_like(x, 2.0 / math.sqrt(math.pi)), call("exp", call("negative", mul(x, x)))
        ),
    ),
    _Unary("sin", np.sin, lambda x, y, g: mul(g, call("cos", x))),
    _Unary("cos", np.cos, lambda x, y, g: call("negative", mul(g, call("sin", x)))),
    _Unary("tan", np.tan, lambda x, y, g: call("divide", g, mul(call("cos", x), call("cos", x)))),
    _Unary("atan", np.arctan, lambda x, y, g: call("divide", g, call("add", scalar_like(x, 1), mul(x, x)))),
    _Unary("log2", np.log2, lambda x, y, g: call("divide", g, mul(x, scalar_like(x, math.log(2.0))))),
    _Unary("log10", np.log10, lambda x, y, g: call("divide", g, mul(x, scalar_like(x, math.log(10.0))))),
    _Unary("floor", np.floor, _zero_grad, NUMERIC, "identity on integers"),
    _Unary("trunc", np.trunc, _zero_grad, NUMERIC, "round toward zero; identity on integers"),
    _Unary("ceil", np.ceil, _zero_grad, NUMERIC, "identity on integers"),
    _Unary("round", np.round, _zero_grad, NUMERIC, "half to even"),
    _Unary("sign", _sign, _zero_grad, NUMERIC),
    _Unary("logical_not", np.logical_not, None, BOOL),
    _Unary("bitwise_not", np.invert, _zero_grad, INT),
    _Unary("isnan", np.isnan, None, FLOAT, out_dtype="bool"),
    _Unary("isinf", np.isinf, None, FLOAT, out_dtype="bool"),
    _Unary("isfinite", np.isfinite, None, FLOAT, out_dtype="bool"),
    _Unary("copy", np.copy, lambda x, y, g: g, ANY_DTYPE),
    _Unary("zeros_like", np.zeros_like, _zero_grad, ANY_DTYPE, "zeros of the argument's type"),
    _Unary("ones_like", np.ones_like, _zero_grad, ANY_DTYPE, "ones of the argument's type"),
]


# Tensor computes: scalar formulas per element (te_compute.unary/binary handle broadcasting). The
# transcendental ones without an LLVM vector intrinsic (tanh, erf, sin, cos, tan, atan) are libm calls.


def _fcall(name: str) -> Callable[[E.Expr], E.Expr]:
    return lambda x: E.call(name, x) if E.is_float(x.dtype) else x  # floor/ceil/round: identity on ints


def _float_only(fn: Callable[[E.Expr], E.Expr]) -> Callable[[E.Expr], E.Expr]:
    def wrapped(x: E.Expr) -> E.Expr:
        if not E.is_float(x.dtype):
            raise Unsupported(f"dtype {x.dtype}: the compute is for floats")
        return fn(x)

    return wrapped


def _signum(x: E.Expr) -> E.Expr:
    one, zero = E.const(1, x.dtype), E.const(0, x.dtype)
    if x.dtype == "uint8":
        return E.select(x > zero, one, zero)
    return E.select(x > zero, one, E.select(x < zero, E.const(-1, x.dtype), zero))


def _isinf(x: E.Expr) -> E.Expr:
    return E.compare("eq", E.call("abs", x), E.const(float("inf"), x.dtype))


_UNARY_TE: dict[str, Callable[[E.Expr], E.Expr]] = {
    "negative": lambda x: -x,
    "abs": lambda x: E.call("abs", x) if E.is_float(x.dtype) else E.select(x < E.const(0, x.dtype), -x, x),
    **{n: _float_only(lambda x, n=n: E.call(n, x)) for n in ("exp", "log", "sqrt", "tanh", "sigmoid", "erf",
                                                          "sin", "cos", "tan", "atan")},
    "rsqrt": _float_only(lambda x: E.const(1.0, x.dtype) / E.call("sqrt", x)),
    "log2": _float_only(lambda x: E.call("log", x) * E.const(1.0 / math.log(2.0), x.dtype)),
    "log10": _float_only(lambda x: E.call("log", x) * E.const(1.0 / math.log(10.0), x.dtype)),
    "floor": _fcall("floor"),
    "ceil": _fcall("ceil"),
    "round": _fcall("round"),
    "trunc": lambda x: E.select(x < E.const(0, x.dtype), E.call("ceil", x), E.call("floor", x))
    if E.is_float(x.dtype) else x,
    "sign": _signum,
    "logical_not": lambda x: E.Not(x),
    "bitwise_not": lambda x: E.bitwise("bitxor", x, E.const(-1, x.dtype)),  # every bit set, in any width
    "isnan": _float_only(lambda x: E.compare("ne", x, x)),
    "isinf": _float_only(_isinf),
    "isfinite": _float_only(lambda x: E.all_of(E.compare("eq", x, x), E.Not(_isinf(x)))),
    "copy": lambda x: x,
    "zeros_like": lambda x: E.const(0, x.dtype),
    "ones_like": lambda x: E.const(1, x.dtype),
}


def _register_unary(spec: _Unary) -> OpDef:
    def type_rel(arg_types: list[Type], attrs: Attrs) -> Type:
        t = tensor_arg(spec.name, arg_types, 0, "data")
        check_dtype(spec.name, t, spec.dtypes, "data")
        return TensorType(t.shape, spec.out_dtype) if spec.out_dtype else t

    def reference(attrs: Attrs, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.dtype.kind in "iu" and spec.name in ("floor", "ceil", "round", "trunc"):
            return x.copy()
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return as_array(spec.fn(x), np.dtype(spec.out_dtype or x.dtype))

    gradient = None
    if spec.grad is not None:
        grad_fn = spec.grad

        def gradient(c: Call, g: Expr) -> list[Expr]:
            return [grad_fn(c.args[0], c, g)]

    return register(
        OpDef(
            name=spec.name,
            arg_names=("data",),
            type_rel=type_rel,
            pattern=OpPattern.ELEMWISE,
            reference=reference,
            gradient=gradient,
            compute=unary(_UNARY_TE[spec.name]) if spec.name in _UNARY_TE else None,
            doc=spec.doc or f"elementwise {spec.name}",
        )
    )


for _spec in _UNARY:
    _register_unary(_spec)
