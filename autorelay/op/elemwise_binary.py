"""Broadcasting binary operators: arithmetic (`add`, `divide`, `power`, …), logical (`logical_and`
…), bitwise (`bitwise_and` …, `left_shift`, `right_shift`) and comparisons (`less`, …), registered
from tables like the unary ops in `elemwise`.

Dtype rules (Relay's): both operands must have the same dtype (no implicit promotion; insert a
`cast`), results keep that dtype, comparisons return `bool`, and integer ops stay integer:

* `divide` on integers truncates toward zero (TVM's `truncdiv`), `mod` takes the sign of the
  dividend (C `fmod`, TVM's `truncmod`); `floor_divide` / `floor_mod` round toward minus infinity.
  Integer division by zero yields 0 (the result is undefined in Relay; we pick a value rather
  than crash the reference).
* `logical_*` require bool operands; `bitwise_*` and the shifts integer ones. A shift count outside
  [0, bits) gives 0 (-1 for a negative number shifted right), as NumPy does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr
from autorelay.ir.types import Type
from autorelay.op.elemwise import (
    ANY_DTYPE,
    BOOL,
    INT,
    NUMERIC,
    as_array,
    check_dtype,
    mul,
    scalar_like,
    sum_to,
)
from autorelay.op.registry import OpDef, OpPattern, call, register
from autorelay.op.shape_utils import broadcast_types, tensor_arg
from autorelay.op.te_compute import Unsupported, binary
from autorelay.te import expr as E

# grad(x, y, out, g) -> (grad of x, grad of y), before summing back over broadcast axes.
BinaryGrad = Callable[[Expr, Expr, Expr, Expr], tuple[Expr, Expr]]


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.floor_divide(a, b)
            fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        return np.where(b == 0, 0, q + fix.astype(q.dtype)).astype(a.dtype)
    return np.true_divide(a, b)


def _trunc_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.fmod(a, b)
    return np.where(b == 0, 0, r).astype(a.dtype) if a.dtype.kind in "iu" else r


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.floor_divide(a, b)
    return np.where(b == 0, 0, q).astype(a.dtype) if a.dtype.kind in "iu" else q


def _floor_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.mod(a, b)
    return np.where(b == 0, 0, r).astype(a.dtype) if a.dtype.kind in "iu" else r


def _trunc(e: Expr) -> Expr:
    # trunc(z) = sign(z) * floor(|z|), built from registered ops so the rule stays in the IR.
    return mul(call("sign", e), call("floor", call("abs", e)))


def _select_grad(cond: Expr, g: Expr, take_when_true: bool) -> Expr:
    zeros = call("zeros_like", g)
    return call("where", cond, g, zeros) if take_when_true else call("where", cond, zeros, g)


@dataclass(frozen=True)
class _Binary:
    name: str
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray]
    grad: BinaryGrad | None
    dtypes: tuple[str, ...] = NUMERIC
    out_dtype: str | None = None  # None: the operands' dtype
    zero_grad: bool = False  # piecewise constant or boolean: gradient is zero for both sides


_ARITH = [
    _Binary("add", np.add, lambda x, y, o, g: (g, g)),
    _Binary("subtract", np.subtract, lambda x, y, o, g: (g, call("negative", g))),
    _Binary("multiply", np.multiply, lambda x, y, o, g: (mul(g, y), mul(g, x))),
    _Binary(
        "divide",
        _trunc_div,
        lambda x, y, o, g: (call("divide", g, y), call("negative", mul(g, call("divide", o, y)))),
    ),
    _Binary(
        "power",
        np.power,
        # d/dx x^y = y * x^(y-1);  d/dy x^y = x^y * log(x)
        lambda x, y, o, g: (
            mul(g, y, call("power", x, call("subtract", y, scalar_like(y, 1.0)))),
            mul(g, o, call("log", x)),
        ),
    ),
    _Binary(
        "maximum",
        np.maximum,
        lambda x, y, o, g: (
            _select_grad(call("greater_equal", x, y), g, True),
            _select_grad(call("greater_equal", x, y), g, False),
        ),
    ),
    _Binary(
        "minimum",
        np.minimum,
        lambda x, y, o, g: (
            _select_grad(call("less_equal", x, y), g, True),
            _select_grad(call("less_equal", x, y), g, False),
        ),
    ),
    # x mod y = x - trunc(x / y) * y
    _Binary(
        "mod",
        _trunc_mod,
        lambda x, y, o, g: (g, call("negative", mul(g, _trunc(call("divide", x, y))))),
    ),
    # x floor_mod y = x - floor(x / y) * y
    _Binary(
        "floor_mod",
        _floor_mod,
        lambda x, y, o, g: (g, call("negative", mul(g, call("floor", call("divide", x, y))))),
    ),
    _Binary("floor_divide", _floor_div, None, zero_grad=True),
]

_LOGICAL = [
    _Binary("logical_and", np.logical_and, None, BOOL),
    _Binary("logical_or", np.logical_or, None, BOOL),
    _Binary("logical_xor", np.logical_xor, None, BOOL),
]

# integers only; shifts by a count outside [0, bits) give NumPy's answers: 0, or -1 for a negative
# number shifted right
_BITWISE = [
    _Binary("bitwise_and", np.bitwise_and, None, INT, zero_grad=True),
    _Binary("bitwise_or", np.bitwise_or, None, INT, zero_grad=True),
    _Binary("bitwise_xor", np.bitwise_xor, None, INT, zero_grad=True),
    _Binary("left_shift", np.left_shift, None, INT, zero_grad=True),
    _Binary("right_shift", np.right_shift, None, INT, zero_grad=True),
]

_COMPARE = [
    _Binary(name, fn, None, ANY_DTYPE, out_dtype="bool", zero_grad=True)
    for name, fn in [
        ("equal", np.equal),
        ("not_equal", np.not_equal),
        ("less", np.less),
        ("less_equal", np.less_equal),
        ("greater", np.greater),
        ("greater_equal", np.greater_equal),
    ]
]


def _float_bin(fn: Callable[[E.Expr, E.Expr], E.Expr]) -> Callable[[E.Expr, E.Expr], E.Expr]:
    """A compute for floats only (integer `power` runs through its reference, reported as a fallback)."""

    def wrapped(a: E.Expr, b: E.Expr) -> E.Expr:
        if not E.is_float(a.dtype):
            raise Unsupported(f"dtype {a.dtype}: the compute is for floats")
        return fn(a, b)

    return wrapped


def _safe_divisor(b: E.Expr) -> tuple[E.Expr, E.Expr]:
    """(b with 1 where it is 0, whether it is 0): an integer op gives 0 for a zero divisor (the
    references' rule; Relay leaves it undefined), and the instruction must never see one."""
    is_zero = E.compare("eq", b, E.const(0, b.dtype))
    return E.select(is_zero, E.const(1, b.dtype), b), is_zero


def _trunc_quotient(a: E.Expr, safe: E.Expr) -> E.Expr:
    """a / safe rounded toward zero (TVM's `truncdiv`), from the floor quotient."""
    q = a // safe
    if a.dtype.startswith("u"):
        return q
    zero = E.const(0, a.dtype)
    inexact = E.compare("ne", a - q * safe, zero)
    signs = E.compare("ne", a < zero, safe < zero)
    return q + E.cast(inexact & signs, a.dtype)


def _integer_rule(float_fn: Callable[[E.Expr, E.Expr], E.Expr],
                  int_fn: Callable[[E.Expr, E.Expr], E.Expr]) -> Callable[[E.Expr, E.Expr], E.Expr]:
    """Floats by `float_fn`; integers by `int_fn` of a never-zero divisor, 0 where it was zero."""

    def rule(a: E.Expr, b: E.Expr) -> E.Expr:
        if E.is_float(a.dtype):
            return float_fn(a, b)
        safe, is_zero = _safe_divisor(b)
        return E.select(is_zero, E.const(0, a.dtype), int_fn(a, safe))

    return rule


def _ftrunc(x: E.Expr) -> E.Expr:
    return E.select(x < E.const(0, x.dtype), E.call("ceil", x), E.call("floor", x))


# Shape arithmetic (ONNX `Div`, `Mod` on int64 extents) runs through the integer rules.
_divide = _integer_rule(lambda a, b: a / b, _trunc_quotient)
_mod = _integer_rule(lambda a, b: a - _ftrunc(a / b) * b, lambda a, s: a - _trunc_quotient(a, s) * s)
_floor_mod = _integer_rule(lambda a, b: a - E.call("floor", a / b) * b, lambda a, s: a - (a // s) * s)
_floor_divide = _integer_rule(lambda a, b: E.call("floor", a / b), lambda a, s: a // s)


def _shift_out_of_range(a: E.Expr, b: E.Expr) -> E.Expr:
    """Whether count `b` is outside [0, bits of a's type): LLVM's shift would be poison there."""
    too_far = b >= E.const(np.iinfo(a.dtype).bits, b.dtype)
    return too_far if b.dtype.startswith("u") else too_far | (b < E.const(0, b.dtype))


def _left_shift(a: E.Expr, b: E.Expr) -> E.Expr:
    outside, zero = _shift_out_of_range(a, b), E.const(0, a.dtype)
    return E.select(outside, zero, E.bitwise("shl", a, E.select(outside, E.const(0, b.dtype), b)))


def _right_shift(a: E.Expr, b: E.Expr) -> E.Expr:
    """Arithmetic for signed types: a count past the width shifts by width - 1 (0 or -1, as NumPy)."""
    outside, last = _shift_out_of_range(a, b), E.const(np.iinfo(a.dtype).bits - 1, b.dtype)
    if a.dtype.startswith("u"):
        return E.select(outside, E.const(0, a.dtype), E.shr(a, E.select(outside, last, b)))
    return E.shr(a, E.select(outside, last, b))


_BINARY_TE: dict[str, Callable[[E.Expr, E.Expr], E.Expr]] = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": _divide,
    "power": _float_bin(lambda a, b: E.call("pow", a, b)),
    "maximum": E.maximum,
    "minimum": E.minimum,
    "mod": _mod,
    "floor_mod": _floor_mod,
    "floor_divide": _floor_divide,
    "bitwise_and": lambda a, b: E.bitwise("bitand", a, b),
    "bitwise_or": lambda a, b: E.bitwise("bitor", a, b),
    "bitwise_xor": lambda a, b: E.bitwise("bitxor", a, b),
    "left_shift": _left_shift,
    "right_shift": _right_shift,
    "logical_and": lambda a, b: a & b,
    "logical_or": lambda a, b: a | b,
    "logical_xor": lambda a, b: E.compare("ne", a, b),
    **{n: (lambda a, b, c=c: E.compare(c, a, b)) for n, c in (
        ("equal", "eq"), ("not_equal", "ne"), ("less", "lt"), ("less_equal", "le"), ("greater", "gt"),
        ("greater_equal", "ge"))},
}


def _register_binary(spec: _Binary) -> OpDef:
    def type_rel(arg_types: list[Type], attrs: Attrs) -> Type:
        lhs = tensor_arg(spec.name, arg_types, 0, "lhs")
        rhs = tensor_arg(spec.name, arg_types, 1, "rhs")
        check_dtype(spec.name, lhs, spec.dtypes, "lhs")
        return broadcast_types(spec.name, lhs, rhs, out_dtype=spec.out_dtype)

    def reference(attrs: Attrs, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.asarray(a), np.asarray(b)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = spec.fn(a, b)
        return as_array(out, np.dtype(spec.out_dtype or a.dtype))

    gradient = None
    if spec.grad is not None:
        grad_fn = spec.grad

        def gradient(c: Call, g: Expr) -> list[Expr]:
            x, y = c.args
            gx, gy = grad_fn(x, y, c, g)
            return [sum_to(gx, x), sum_to(gy, y)]

    elif spec.zero_grad:

        def gradient(c: Call, g: Expr) -> list[Expr]:
            return [call("zeros_like", c.args[0]), call("zeros_like", c.args[1])]

    return register(
        OpDef(
            name=spec.name,
            arg_names=("lhs", "rhs"),
            type_rel=type_rel,
            pattern=OpPattern.BROADCAST,
            reference=reference,
            gradient=gradient,
            compute=binary(_BINARY_TE[spec.name]) if spec.name in _BINARY_TE else None,
            doc=f"broadcasting elementwise {spec.name}",
        )
    )


for _spec in _ARITH + _LOGICAL + _BITWISE + _COMPARE:
    _register_binary(_spec)
