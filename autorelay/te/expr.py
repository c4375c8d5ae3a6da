"""Scalar expressions shared by the compute DSL (`te`) and the loop IR (`tir`).

One expression language serves both layers so that lowering is a substitution, not a translation:
`Read(tensor, indices)` exists only in compute declarations and becomes `Load(buffer, flat_index)`
in the loop IR. Nodes are frozen; `Var` compares by identity (two loops both called `i` are
different variables), every other node structurally.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FLOAT_DTYPES = ("float16", "float32", "float64")
# every integer type the IR holds; uint16 also carries bfloat16 words (see BF16_FUNCS)
INT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
DTYPES = (*FLOAT_DTYPES, *INT_DTYPES, "bool")


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


class Expr:
    """Base of every scalar expression; overloads arithmetic so computes read like maths."""

    __slots__ = ()
    dtype: str

    def __add__(self, o: Any) -> Expr:
        return binary("add", self, o)

    def __radd__(self, o: Any) -> Expr:
        return binary("add", o, self)

    def __sub__(self, o: Any) -> Expr:
        return binary("sub", self, o)

    def __rsub__(self, o: Any) -> Expr:
        return binary("sub", o, self)

    def __mul__(self, o: Any) -> Expr:
        return binary("mul", self, o)

    def __rmul__(self, o: Any) -> Expr:
        return binary("mul", o, self)

    def __truediv__(self, o: Any) -> Expr:
        return binary("div", self, o)

    def __rtruediv__(self, o: Any) -> Expr:
        return binary("div", o, self)

    def __floordiv__(self, o: Any) -> Expr:
        return binary("floordiv", self, o)

    def __rfloordiv__(self, o: Any) -> Expr:
        return binary("floordiv", o, self)

    def __mod__(self, o: Any) -> Expr:
        return binary("mod", self, o)

    def __rmod__(self, o: Any) -> Expr:
        return binary("mod", o, self)

    def __neg__(self) -> Expr:
        return binary("sub", const(0, self.dtype), self)

    def __lt__(self, o: Any) -> Expr:
        return compare("lt", self, o)

    def __le__(self, o: Any) -> Expr:
        return compare("le", self, o)

    def __gt__(self, o: Any) -> Expr:
        return compare("gt", self, o)

    def __ge__(self, o: Any) -> Expr:
        return compare("ge", self, o)

    def __and__(self, o: Any) -> Expr:
        return binary("and", self, o)

    def __or__(self, o: Any) -> Expr:
        return binary("or", self, o)

    def __bool__(self) -> bool:
        raise TypeError("an expression has no truth value; use select()/all_of() instead of `if`/`and`")

    def __hash__(self) -> int:  # replaced by dataclass-generated hashes in subclasses
        return id(self)


@dataclass(frozen=True, eq=False, slots=True)
class Var(Expr):
    """A loop or index variable. Identity-compared."""

    name: str
    dtype: str = "int64"

    def __repr__(self) -> str:
        return self.name

    def __hash__(self) -> int:
        return id(self)


@dataclass(frozen=True, slots=True)
class Const(Expr):
    value: int | float | bool
    dtype: str

    def __repr__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True, slots=True)
class Bin(Expr):
    """Binary arithmetic: add sub mul div floordiv mod min max shr, logical and or (bool), and
    the bitwise bitand bitor bitxor shl of integers."""

    op: str
    a: Expr
    b: Expr
    dtype: str


@dataclass(frozen=True, slots=True)
class Cmp(Expr):
    """Comparison lt le gt ge eq ne; always bool."""

    op: str
    a: Expr
    b: Expr
    dtype: str = "bool"


@dataclass(frozen=True, slots=True)
class Not(Expr):
    a: Expr
    dtype: str = "bool"


@dataclass(frozen=True, slots=True)
class Select(Expr):
    cond: Expr
    t: Expr
    f: Expr
    dtype: str


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    a: Expr
    dtype: str


MATH_FUNCS = ("exp", "log", "sqrt", "tanh", "sigmoid", "abs", "floor", "ceil", "erf", "pow", "round",
              "sin", "cos", "tan", "atan")


# bfloat16 conversions. The IR and NumPy have no bfloat16 type, so a bf16 tensor is stored as
# uint16 words (the top half of the float32 bit pattern); these two calls are the only way in and
# out: `bf16_to_f32` is exact (the word shifted left by 16), `f32_to_bf16` rounds to nearest even
# and keeps a NaN a (quiet) NaN, as `autorelay.op.bf16.to_bf16` does in NumPy.
BF16_FUNCS = {"bf16_to_f32": ("uint16", "float32"), "f32_to_bf16": ("float32", "uint16")}


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """A pure math function (see MATH_FUNCS), a bfloat16 conversion (see BF16_FUNCS), a bit
    reinterpretation (`reinterpret`), or in loop IR the GPU's warp shuffle
    (`autorelay.tir.nodes.SHFL_DOWN`, which is not pure)."""

    name: str
    args: tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class IterVar:
    """An axis of a compute: its variable, extent and whether it is spatial or a reduction."""

    var: Var
    extent: int
    kind: str = "spatial"  # or "reduce"

    @property
    def name(self) -> str:
        return self.var.name


def _delegate(name: str) -> Any:
    return lambda self, *o: getattr(self.var, name)(*o)


# A reduction axis reads like its variable inside index arithmetic (`A[i, k + 1]`).
for _op in (
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__floordiv__",
    "__rfloordiv__",
    "__mod__",
    "__rmod__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
):
    setattr(IterVar, _op, _delegate(_op))


@dataclass(frozen=True, slots=True)
class Read(Expr):
    """Element of a tensor at multi-dimensional indices (compute DSL only)."""

    tensor: Any  # autorelay.te.tensor.Tensor (identity-compared)
    indices: tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class Reduce(Expr):
    """A commutative reduction (sum/max/min/prod) of `body` over `axes`; only at the top of a compute."""

    combiner: str
    body: Expr
    axes: tuple[IterVar, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class Load(Expr):
    """Element of a loop-IR buffer at a flat index (loop IR only)."""

    buffer: Any  # autorelay.tir.nodes.Buffer
    index: Expr
    dtype: str


def const(value: int | float | bool, dtype: str | None = None) -> Const:
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else "float32"
    if is_int(dtype):
        value = int(value)
    elif is_float(dtype):
        value = float(value)
    else:
        value = bool(value)
    return Const(value, dtype)


def as_expr(x: Any, like: str | None = None) -> Expr:
    """Wrap a Python scalar; `like` is the dtype of the other operand, which a literal adopts."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, IterVar):
        return x.var
    if isinstance(x, bool):
        return const(x, "bool")
    if isinstance(x, int):
        return const(x, like if like is not None and like != "bool" else "int64")
    if isinstance(x, float):
        return const(x, like if like is not None and is_float(like) else "float32")
    raise TypeError(f"cannot use {type(x).__name__} {x!r} in a tensor expression")


def _unify(a: Any, b: Any, what: str) -> tuple[Expr, Expr]:
    a if isinstance(a, Expr) else None
    eb = b if isinstance(b, Expr) else None
    a = as_expr(a, eb.dtype if eb is not None else None)
    b = as_expr(b, a.dtype)
    if a.dtype != b.dtype:
        if is_int(a.dtype) and is_int(b.dtype):  # index arithmetic mixes widths: widen to int64
            a = a if a.dtype == "int64" else Cast(a, "int64")
            b = b if b.dtype == "int64" else Cast(b, "int64")
        else:
            raise TypeError(f"{what}: operand dtypes differ ({a.dtype} vs {b.dtype}); cast one explicitly")
    return a, b


def binary(op: str, a: Any, b: Any) -> Expr:
    a, b = _unify(a, b, op)
    if op in ("and", "or") and a.dtype != "bool":
        raise TypeError(f"{op}: needs bool operands, got {a.dtype}")
    if op == "div" and not is_float(a.dtype):
        raise TypeError("'/' on integers is ambiguous; use // (floor division)")
    return Bin(op, a, b, a.dtype)


def compare(op: str, a: Any, b: Any) -> Expr:
    a, b = _unify(a, b, op)
    return Cmp(op, a, b)


def minimum(a: Any, b: Any) -> Expr:
    return binary("min", a, b)


def maximum(a: Any, b: Any) -> Expr:
    return binary("max", a, b)


def shr(a: Any, b: Any) -> Expr:
    """Arithmetic shift right of an integer: `floor(a / 2**b)` (logical for unsigned types)."""
    out = binary("shr", a, b)
    if not is_int(out.dtype):
        raise TypeError(f"shr: needs integer operands, got {out.dtype}")
    return out


def bitwise(op: str, a: Any, b: Any) -> Expr:
    """Bitwise `bitand`, `bitor`, `bitxor` of integers, or `shl` (a shift count of at least the bit
    width is poison in LLVM: the caller keeps it in range)."""
    if op not in ("bitand", "bitor", "bitxor", "shl"):
        raise TypeError(f"unknown bitwise op {op!r}")
    out = binary(op, a, b)
    if not is_int(out.dtype):
        raise TypeError(f"{op}: needs integer operands, got {out.dtype}")
    return out


def select(cond: Any, t: Any, f: Any) -> Expr:
    t, f = _unify(t, f, "select")
    cond = as_expr(cond)
    if cond.dtype != "bool":
        raise TypeError(f"select: condition must be bool, got {cond.dtype}")
    return Select(cond, t, f, t.dtype)


def cast(x: Any, dtype: str) -> Expr:
    if dtype not in DTYPES:
        raise TypeError(f"unknown dtype {dtype!r}")
    x = as_expr(x)
    return x if x.dtype == dtype else Cast(x, dtype)


def call(name: str, *args: Any) -> Expr:
    if name in BF16_FUNCS:
        src, dst = BF16_FUNCS[name]
        x = as_expr(args[0])
        if len(args) != 1 or x.dtype != src:
            raise TypeError(f"{name}: needs one {src} argument, got {x.dtype}")
        return Call(name, (x,), dst)
    if name not in MATH_FUNCS:
        raise TypeError(f"unknown math function {name!r} (known: {', '.join(MATH_FUNCS)})")
    ex = [as_expr(a) for a in args]
    if not is_float(ex[0].dtype):
        raise TypeError(f"{name}: needs a float argument, got {ex[0].dtype}")
    return Call(name, tuple(ex), ex[0].dtype)


REINTERPRET = "reinterpret"
# the bits of each element type in memory (a bool is a byte; bfloat16 is a target's lane type, which
# the IR holds as uint16 words)
DTYPE_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64, "int8": 8, "uint8": 8, "int16": 16,
              "uint16": 16, "int32": 32, "uint32": 32, "int64": 64, "uint64": 64, "bool": 8}


def reinterpret_mismatch(src: str, dst: str) -> str | None:
    """Why `src` bits cannot be read as `dst` (`reinterpret`), or None when they can: the widths
    differ, or `dst` is bool (a byte other than 0 or 1 is no bool value)."""
    if dst == "bool" and src != "bool":
        return (f"data has dtype {src}, whose bits cannot be read as bool (a byte other than 0 or 1 is no "
                "bool value)")
    if DTYPE_BITS[src] != DTYPE_BITS[dst]:
        return (f"data has dtype {src} ({DTYPE_BITS[src]} bits) but dtype={dst} has {DTYPE_BITS[dst]} bits: "
                "the widths must match")
    return None


def reinterpret(x: Any, dtype: str) -> Expr:
    """`x`'s bits read as `dtype`, of the same width: no value conversion (a float's sign, exponent
    and mantissa become an integer's bits). A bool becomes the byte 0 or 1; nothing becomes a bool
    (`reinterpret_mismatch`)."""
    x = as_expr(x)
    if dtype not in DTYPES:
        raise TypeError(f"unknown dtype {dtype!r}")
    why = reinterpret_mismatch(x.dtype, dtype)
    if why:
        raise TypeError(f"reinterpret: {why}")
    return x if x.dtype == dtype else Call(REINTERPRET, (x,), dtype)


def all_of(*conds: Expr) -> Expr:
    out: Expr = const(True)
    for c in conds:
        out = c if isinstance(out, Const) else binary("and", out, c)
    return out
