"""Shape arithmetic shared by every op family's type relation.

Dimensions are `int`, `SymDim` (a named extent: equal names are equal extents) or `AnyDim` (`?`,
unknown; two `?` are never known to be equal). Relations must accept all three, so the helpers here
answer "known equal", "known different" and "don't know" separately instead of comparing with `==`.

Every helper that can fail takes the op name and raises `rel_error(op, ...)`, so messages always
name the op, the argument and the shapes involved.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from autorelay.ir.types import AnyDim, Dim, IncompleteType, TensorType, TupleType, Type, TypeVar
from autorelay.op.registry import NotReady, rel_error

__all__ = [
    "ANY",
    "broadcast_shapes",
    "broadcast_types",
    "dim_known_different",
    "dims_equal",
    "fmt_shape",
    "is_static_shape",
    "merge_dims",
    "normalize_axes",
    "normalize_axis",
    "prod",
    "tensor_arg",
    "tuple_arg",
]

ANY = AnyDim()


def fmt_shape(shape: Iterable[Dim]) -> str:
    """A shape as users write it: `(1, 3, n, ?)`; one-element shapes keep their comma."""
    parts = [str(d) for d in shape]
    if len(parts) == 1:
        return f"({parts[0]},)"
    return "(" + ", ".join(parts) + ")"


def dims_equal(a: Dim, b: Dim) -> bool:
    """True only when `a` and `b` are *known* to be the same extent (`?` is equal to nothing)."""
    if isinstance(a, AnyDim) or isinstance(b, AnyDim):
        return False
    return a == b


def dim_known_different(a: Dim, b: Dim) -> bool:
    """True only when `a` and `b` are both static and differ (so the program is certainly wrong)."""
    return isinstance(a, int) and isinstance(b, int) and a != b


def merge_dims(a: Dim, b: Dim) -> Dim:
    """The more informative of two extents that must be equal (caller checked they may be)."""
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    if isinstance(a, AnyDim):
        return b
    return a


def is_static_shape(shape: Sequence[Dim]) -> bool:
    return all(isinstance(d, int) for d in shape)


def prod(dims: Iterable[Dim]) -> int | None:
    """The product of static extents, or None if any extent is symbolic (0 wins: it is 0)."""
    result = 1
    symbolic = False
    for d in dims:
        if isinstance(d, int):
            result *= d
        else:
            symbolic = True
    if result == 0:
        return 0
    return None if symbolic else result


def normalize_axis(op: str, axis: Any, ndim: int, arg: str = "axis", extra: int = 0) -> int:
    """Map a possibly negative axis into `[0, ndim + extra)`; `extra` allows positions past the end
    (e.g. `expand_dims` may insert at `ndim`)."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise rel_error(op, f"{arg} must be an integer, got {axis!r}")
    size = ndim + extra
    if not -size <= axis < size:
        raise rel_error(op, f"{arg}={axis} is out of range for a tensor of rank {ndim}")
    return axis + size if axis < 0 else axis


def normalize_axes(op: str, axis: Any, ndim: int, exclude: bool = False, arg: str = "axis") -> list[int]:
    """Relay's reduction axis convention: None means all axes (with or without `exclude`, as in
    Relay's GetReduceAxes), an int one axis, a list several. With `exclude`, the result is every
    axis *not* listed. Returned sorted and without repeats; a repeated axis is an error because it
    is almost always a typo."""
    if axis is None:
        return list(range(ndim))
    raw = [axis] if isinstance(axis, int) and not isinstance(axis, bool) else list(axis)
    axes: list[int] = [normalize_axis(op, a, ndim, arg) for a in raw]
    if len(set(axes)) != len(axes):
        raise rel_error(op, f"{arg}={tuple(raw)} names an axis twice (rank {ndim})")
    if exclude:
        return [i for i in range(ndim) if i not in axes]
    return sorted(axes)


def _broadcast_dim(op: str, a: Dim, b: Dim, names: tuple[str, str], shapes: tuple[Any, Any]) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        if a == b or b == 1:
            return a
        if a == 1:
            return b
        raise rel_error(
            op,
            f"cannot broadcast {names[0]} of shape {fmt_shape(shapes[0])} with {names[1]} of shape "
            f"{fmt_shape(shapes[1])} (extents {a} and {b})",
        )
    # At least one side is symbolic. A static 1 always yields the other side; a static extent
    # other than 1 is the only legal value, so it wins (the symbolic side must equal it or be 1).
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    if dims_equal(a, b):
        return a
    return ANY  # n vs m, or ? vs anything: unknown until run time


def broadcast_shapes(
    op: str, lhs: Sequence[Dim], rhs: Sequence[Dim], names: tuple[str, str] = ("lhs", "rhs")
) -> tuple[Dim, ...]:
    """NumPy broadcasting of two shapes, right-aligned, with symbolic extents.

    `(n, 1, 3)` with `(4, 1)` is `(n, 4, 3)`; `(n,)` with `(m,)` is `(?,)`; `(2,)` with `(3,)` is
    an error naming the op, both arguments and both shapes.
    """
    ndim = max(len(lhs), len(rhs))
    a = (1,) * (ndim - len(lhs)) + tuple(lhs)
    b = (1,) * (ndim - len(rhs)) + tuple(rhs)
    return tuple(_broadcast_dim(op, x, y, names, (lhs, rhs)) for x, y in zip(a, b))


def tensor_arg(op: str, arg_types: Sequence[Type], index: int, name: str) -> TensorType:
    """Argument `index` as a TensorType; NotReady while unknown, an error if it is not a tensor."""
    t = arg_types[index]
    if isinstance(t, IncompleteType | TypeVar):
        raise NotReady(f"{op}: type of {name} not known yet")
    if not isinstance(t, TensorType):
        raise rel_error(op, f"argument {name} must be a tensor, got {t}")
    return t


def tuple_arg(op: str, arg_types: Sequence[Type], index: int, name: str) -> list[TensorType]:
    """Argument `index` as a tuple of tensors (concatenate, stack …); NotReady while unknown."""
    t = arg_types[index]
    if isinstance(t, IncompleteType | TypeVar):
        raise NotReady(f"{op}: type of {name} not known yet")
    if not isinstance(t, TupleType):
        raise rel_error(op, f"argument {name} must be a tuple of tensors, got {t}")
    fields: list[TensorType] = []
    for i, f in enumerate(t.fields):
        if isinstance(f, IncompleteType | TypeVar):
            raise NotReady(f"{op}: type of {name}.{i} not known yet")
        if not isinstance(f, TensorType):
            raise rel_error(op, f"field {i} of {name} must be a tensor, got {f}")
        fields.append(f)
    return fields


def broadcast_types(
    op: str, lhs: TensorType, rhs: TensorType, names: tuple[str, str] = ("lhs", "rhs"),
    out_dtype: str | None = None,
) -> TensorType:
    """The result type of a broadcasting binary op whose operands must share a dtype."""
    if lhs.dtype != rhs.dtype:
        raise rel_error(
            op,
            f"{names[0]} has dtype {lhs.dtype} but {names[1]} has dtype {rhs.dtype} "
            f"(shapes {fmt_shape(lhs.shape)} and {fmt_shape(rhs.shape)}); insert a cast",
        )
    shape = broadcast_shapes(op, lhs.shape, rhs.shape, names)
    return TensorType(shape, out_dtype or lhs.dtype)
