"""Helpers the ops' `compute` functions share (NumPy broadcasting, axis reductions, index maps).

An op's compute (see `autorelay.op.registry`) receives its input tensors, its attrs and its
inferred output type, so shapes never have to be re-derived here: the output type is the truth and
the helpers only say where each output element comes from. A compute that cannot express an op
for the given dtypes raises `Unsupported`; lowering then runs that op through its NumPy reference
(reported as a fallback kernel), never silently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from autorelay.ir.types import TensorType, Type
from autorelay.te import expr as E
from autorelay.te import tensor as te
from autorelay.te.tensor import Tensor

TE_DTYPES = E.DTYPES


class Unsupported(NotImplementedError):
    """This compute cannot express the op for these inputs (dtype, dynamic shape, …)."""


def out_shape(out_type: Type) -> tuple[int, ...]:
    if not isinstance(out_type, TensorType) or not out_type.is_static:
        raise Unsupported(f"needs a static tensor output type, got {out_type}")
    return tuple(int(d) for d in out_type.concrete_shape)


def out_dtype(out_type: Type) -> str:
    assert isinstance(out_type, TensorType)
    if out_type.dtype not in TE_DTYPES:
        raise Unsupported(f"dtype {out_type.dtype} has no kernel support")
    return out_type.dtype


def check_dtypes(inputs: Sequence[Tensor], allowed: Sequence[str] = TE_DTYPES) -> None:
    for t in inputs:
        if t.dtype not in allowed:
            raise Unsupported(f"input {t.name} has dtype {t.dtype}; the compute handles {', '.join(allowed)}")


def bcast_read(x: Tensor, idx: Sequence[E.Expr]) -> E.Expr:
    """`x` read at output indices `idx` under NumPy broadcasting (extent-1 dims read index 0)."""
    sub = idx[len(idx) - x.ndim:] if x.ndim else ()
    return x[tuple(0 if s == 1 else i for i, s in zip(sub, x.shape))] if x.ndim else x[()]


def compute0(shape: Sequence[int], fn: Callable[..., E.Expr], name: str, tag: str = "") -> Tensor:
    """`te.compute` that also accepts a 0-d shape (a scalar result)."""
    if not shape:
        return te.compute((), lambda: E.as_expr(fn()), name=name, tag=tag)
    return te.compute(tuple(shape), lambda *i: E.as_expr(fn(*i)), name=name, tag=tag)


def bcast_map(fn: Callable[..., E.Expr], inputs: Sequence[Tensor], out_type: Type, name: str) -> Tensor:
    """The output element is `fn` of every input's broadcast element (elementwise/broadcast ops)."""
    shape = out_shape(out_type)
    check_dtypes(inputs)
    out_dtype(out_type)
    return compute0(shape, lambda *i: fn(*[bcast_read(x, i) for x in inputs]), name, tag="elemwise")


def unary(fn: Callable[[E.Expr], E.Expr], dtypes: Sequence[str] = TE_DTYPES) -> Callable:
    """A compute for an elementwise one-argument op: `fn(x)` per element."""

    def compute(inputs: list[Tensor], attrs, out_type: Type) -> Tensor:
        check_dtypes(inputs[:1], dtypes)
        return bcast_map(fn, inputs[:1], out_type, name="unary")

    return compute


def binary(fn: Callable[[E.Expr, E.Expr], E.Expr], dtypes: Sequence[str] = TE_DTYPES) -> Callable:
    """A compute for a broadcasting two-argument op."""

    def compute(inputs: list[Tensor], attrs, out_type: Type) -> Tensor:
        check_dtypes(inputs, dtypes)
        return bcast_map(fn, inputs, out_type, name="binary")

    return compute


def scalar(value: float | int | bool, dtype: str) -> E.Expr:
    return E.const(value, dtype)


def index_map(x: Tensor, out_type: Type, src: Callable[..., Sequence[E.Expr]], name: str) -> Tensor:
    """An injective op: output element `i` is `x[src(*i)]`."""
    shape = out_shape(out_type)
    return compute0(shape, lambda *i: x[tuple(src(*i))], name, tag="injective")


def row_major(idx: Sequence[E.Expr], shape: Sequence[int]) -> E.Expr:
    """Flat row-major offset of `idx` in `shape`."""
    flat: E.Expr = E.const(0)
    for i, s in zip(idx, shape):
        flat = flat * s + i if not (isinstance(flat, E.Const) and flat.value == 0) else E.as_expr(i)
    return flat


def unflatten(flat: E.Expr, shape: Sequence[int]) -> list[E.Expr]:
    """Indices into `shape` of the flat row-major offset `flat`."""
    out: list[E.Expr] = []
    stride = 1
    for s in reversed(shape):
        out.append(E.const(0) if s == 1 else (flat // stride) % s if stride > 1 else flat % s)
        stride *= s
    return list(reversed(out))


def reshape_groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """The shortest runs of `src` and `dst` axes (positions) with equal element counts, in order;
    axes of extent 1 belong to no run. None when the counts differ (not a reshape)."""
    a = [d for d, n in enumerate(src) if n != 1]
    b = [d for d, n in enumerate(dst) if n != 1]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        ga, gb = [a[i]], [b[j]]
        pa, pb = src[a[i]], dst[b[j]]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb and i < len(a):
                ga.append(a[i])
                pa, i = pa * src[a[i]], i + 1
            elif pb < pa and j < len(b):
                gb.append(b[j])
                pb, j = pb * dst[b[j]], j + 1
            else:
                return None
        groups.append((ga, gb))
    return groups if i == len(a) and j == len(b) else None


def reshape(x: Tensor, out_type: Type, name: str = "reshape") -> Tensor:
    """Same elements, new shape (reshape, squeeze, expand_dims, batch_flatten …).

    Each output axis is mapped through the smallest run of axes it shares with the input, not
    through one flat offset: an axis both shapes keep (the 64 of (1, 12, 129, 64) → (12, 129, 64))
    reads the input along that axis directly, so a vectorized loop over it stays one contiguous
    load instead of per-lane divisions."""
    shape = out_shape(out_type)
    if tuple(shape) == tuple(x.shape):
        return compute0(shape, lambda *i: x[i], name, tag="injective")
    groups = reshape_groups(x.shape, shape)
    if groups is None:
        return index_map(x, out_type, lambda *i: unflatten(row_major(i, shape), x.shape), name)

    def source(*i: E.Expr) -> list[E.Expr]:
        out: list[E.Expr] = [E.const(0)] * len(x.shape)
        for src_axes, dst_axes in groups:
            if len(src_axes) == 1 and len(dst_axes) == 1:
                out[src_axes[0]] = i[dst_axes[0]]
                continue
            flat = row_major([i[d] for d in dst_axes], [shape[d] for d in dst_axes])
            for d, v in zip(src_axes, unflatten(flat, [x.shape[d] for d in src_axes])):
                out[d] = v
        return out

    return index_map(x, out_type, source, name)


def reduction(
    x: Tensor,
    combiner: str,
    axes: Sequence[int],
    keepdims: bool,
    out_type: Type,
    body: Callable[[E.Expr, Sequence[E.Expr]], E.Expr] | None = None,
    name: str = "reduce",
) -> Tensor:
    """`combiner` (sum/max/min/prod) of `body(x[...], out_index)` over `axes` of `x`.

    `body` defaults to the element itself; it sees the output index so a producer like variance's
    `(x - mean)^2` can read another tensor at the kept positions.
    """
    shape = out_shape(out_type)
    axes = sorted(a % x.ndim for a in axes) if x.ndim else []
    if not axes:  # nothing reduced: an elementwise copy (through body)
        return compute0(shape, lambda *i: (body or (lambda v, _: v))(x[i], i) if x.ndim else x[()], name)
    raxes = {a: te.reduce_axis(x.shape[a], f"r{a}") for a in axes}
    red = {"sum": te.sum, "max": te.max, "min": te.min, "prod": te.prod}[combiner]

    def fn(*idx: E.Expr) -> E.Expr:
        it = iter(idx)
        src: list = []
        for d in range(x.ndim):
            if d in raxes:
                if keepdims:
                    next(it)
                src.append(raxes[d].var)
            else:
                src.append(next(it))
        v = x[tuple(src)]
        return red(body(v, idx) if body is not None else v, list(raxes.values()))

    if not shape:  # reduce to a scalar: compute a 1-element tensor and read it as 0-d
        acc = te.compute((1,), lambda i0: fn(), name=f"{name}_acc", tag="reduce")
        return te.compute((), lambda: acc[0], name=name)
    return te.compute(shape, fn, name=name, tag="reduce")


def map_tensor(t: Tensor, fn: Callable[[E.Expr], E.Expr], name: str) -> Tensor:
    return compute0(t.shape, lambda *i: fn(t[i] if t.ndim else t[()]), name)
