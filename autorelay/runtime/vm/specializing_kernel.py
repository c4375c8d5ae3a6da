"""Specialising kernels: a compiled kernel per concrete shape for primitive functions with `?` extents.

A primitive function that calls a dynamic op (`autorelay.op.dynamic`: `dyn.reshape`,
`dyn.strided_slice`, `dyn.pad`) or whose parameter/result types have non-static extents cannot be
lowered once: loop bounds are unknown. Rather than running NumPy references on the data, the VM
gives it a `SpecializingKernel`. At each call it reads the concrete input shapes (and, for a dyn
op, the runtime values of its small shape-like inputs), rebuilds the function with static types
(`specialize`: each dyn op becomes its static counterpart with attributes from those values),
re-infers types and compiles it through the same seam as static kernels
(`autorelay.primitive.compile_primitive`, via the provider's `compile` callback). Compiled kernels
are cached by (shapes, dtypes, values), least recently used first out, so a loop over the same
shapes compiles once.

The cache starts small and doubles whenever a shape it evicted comes back: a loop that meets more
shapes per call than the cache holds (Mask R-CNN pastes each of its detections' masks at that
box's size) would otherwise evict every one before its next use and compile it again on every
call. A kernel that only ever meets new shapes (a new image's counts) does not grow.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Function, Op, Tuple, Var
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.ir.visitor import ExprMutator, post_order
from autorelay.op.dynamic import VALUE_ARGS, static_form
from autorelay.runtime.vm.row_buckets import bucket, independent_rows, row_params
from autorelay.typing.module import infer_expr

DEFAULT_MAX_ENTRIES = 16  # specialisations a kernel keeps at first
MOST_ENTRIES = 1024  # and at most, however often its evicted shapes come back


class SpecializationError(ValueError):
    """A primitive function the specialising kernel cannot rebuild with static shapes."""


def _dynamic(t: Type | None) -> bool:
    if isinstance(t, TensorType):
        return not t.is_static
    if isinstance(t, TupleType):
        return any(_dynamic(f) for f in t.fields)
    return False


def needs_specializing(fn: Function) -> bool:
    """Whether `fn` calls a dyn op or has non-static extents in its parameter or result types
    (only functions of tensors: a tuple-typed parameter keeps the provider's static path)."""
    if not all(isinstance(p.type_annotation, TensorType) for p in fn.params):
        return False
    if any(_dynamic(p.type_annotation) for p in fn.params):
        return True
    ret = fn.ret_type
    if ret is None and fn.body.has_checked_type:
        ret = fn.body.checked_type
    if _dynamic(ret):
        return True
    return any(isinstance(n, Call) and isinstance(n.op, Op) and n.op.name in VALUE_ARGS
               for n in post_order(fn.body))


def value_params(fn: Function) -> tuple[int, ...]:
    """Indices of the parameters whose runtime values a dyn op in `fn` reads (its shape-like
    arguments); each such argument must be a parameter or a constant."""
    index = {id(p): i for i, p in enumerate(fn.params)}
    out: set[int] = set()
    for n in post_order(fn.body):
        if not (isinstance(n, Call) and isinstance(n.op, Op) and n.op.name in VALUE_ARGS):
            continue
        for k in (0, *VALUE_ARGS[n.op.name]):
            a = n.args[k]
            if id(a) in index:
                if k:
                    out.add(index[id(a)])
            elif not isinstance(a, Constant):
                what = "data" if k == 0 else f"argument {k}"
                raise SpecializationError(f"{n.op.name}: {what} must be a parameter of its primitive "
                                          "function or a constant (dyn ops are never fused)")
    return tuple(sorted(out))


class _Specialize(ExprMutator):
    """Rebuilds a primitive function's body over static parameters, dyn ops made static."""

    def __init__(self, params: dict[int, tuple[Var, np.ndarray]]) -> None:
        super().__init__()
        self.params = params  # id(old param) -> (new param, runtime value)

    def visit_var(self, v: Var) -> Expr:
        hit = self.params.get(id(v))
        return v if hit is None else hit[0]

    def visit_call(self, c: Call) -> Expr:
        if isinstance(c.op, Op) and c.op.name == "concatenate" and isinstance(c.args[0], Tuple):
            return self._concatenate(c)
        if not (isinstance(c.op, Op) and c.op.name in VALUE_ARGS):
            return super().visit_call(c)
        args = [self.visit(a) for a in c.args]
        values = [self._value(c.args[k]) for k in VALUE_ARGS[c.op.name]]
        data = self._value(c.args[0])
        return static_form(c.op.name, c.attrs, args, data.shape, values)

    def _concatenate(self, c: Call) -> Expr:
        """A concatenation without its pieces that are empty now (a stack grown from nothing, as an
        ONNX Loop's scan outputs are): kernels take no empty buffers, and those add nothing."""
        fields = [self.visit(f) for f in c.args[0].fields]  # type: ignore[attr-defined]
        full = [f for f in fields if not _empty(f)]
        if full and len(full) < len(fields):
            fields = full
        return Call(c.op, (Tuple(tuple(fields)),), c.attrs, c.type_args)

    def _value(self, e: Expr) -> np.ndarray:
        if isinstance(e, Constant):
            return e.data
        return self.params[id(e)][1]


def _empty(e: Expr) -> bool:
    """Whether `e` is a static parameter or constant with no elements."""
    if isinstance(e, Constant):
        return e.data.size == 0
    t = e.type_annotation if isinstance(e, Var) else None
    return isinstance(t, TensorType) and t.has_no_elements


def specialize(fn: Function, args: Sequence[np.ndarray]) -> Function:
    """`fn` rebuilt for these concrete arguments: static parameter types, dyn ops made static,
    types re-inferred (a value that contradicts the data raises `DynamicValueError`)."""
    params: dict[int, tuple[Var, np.ndarray]] = {}
    new_params = []
    for p, a in zip(fn.params, args):
        ann = p.type_annotation
        dtype = ann.dtype if isinstance(ann, TensorType) else str(a.dtype)
        v = Var(p.name_hint, TensorType(tuple(int(d) for d in a.shape), dtype))
        params[id(p)] = (v, a)
        new_params.append(v)
    body = _Specialize(params).visit(fn.body)
    out = Function(tuple(new_params), body, None, (), fn.attrs)
    infer_expr(out)
    return out


class _Empty:
    """The result of a specialisation with no elements: nothing to compute, so no kernel."""

    def __init__(self, t: TensorType) -> None:
        self.shape, self.dtype = t.concrete_shape, np.dtype(t.dtype)

    def __call__(self, *args: Any) -> np.ndarray:
        return np.empty(self.shape, self.dtype)


class _Const:
    """A specialisation that folded to a constant (`shape_of` of known extents): no kernel needed."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def __call__(self, *args: Any) -> np.ndarray:
        return self.value.copy()


def _trivial(fn: Function) -> _Empty | _Const | None:
    """A runner for a specialisation with nothing to compute (an empty result, a constant, a
    constant fill: Mask R-CNN's paste loop makes a zero canvas of each box's size)."""
    if isinstance(fn.body, Constant):
        return _Const(np.asarray(fn.body.data))
    t = fn.body.checked_type
    if isinstance(t, TensorType) and t.has_no_elements:
        return _Empty(t)
    body = fn.body
    if isinstance(body, Call) and isinstance(body.op, Op) and body.op.name == "full" \
            and isinstance(body.args[0], Constant) and isinstance(t, TensorType):
        return _Const(np.full(t.concrete_shape, body.args[0].data, t.dtype))
    return None


class SpecializingKernel:
    """A primitive function with `?` extents, compiled once per concrete (shapes, values) key.

    `compile(fn) -> (callable, source)` compiles a static primitive function (the provider's
    path); at most `max_entries` specialisations are kept, least recently used evicted first.
    `max_entries` doubles, up to `most_entries`, each time an evicted key is met again."""

    def __init__(self, fn: Function, compile: Callable[[Function], tuple[Callable[..., Any], str]],
                 max_entries: int = DEFAULT_MAX_ENTRIES, most_entries: int = MOST_ENTRIES) -> None:
        self.fn, self._compile = fn, compile
        self.max_entries, self.most_entries = max_entries, max(most_entries, max_entries)
        self.values = value_params(fn)
        self.cache: OrderedDict[tuple, Callable[..., Any]] = OrderedDict()
        self.evicted: OrderedDict[tuple, None] = OrderedDict()  # recent evictions' keys (no kernels)
        self.compiled = 0  # specialisations ever compiled (evictions recompile)
        self.sources: set[str] = set()  # what ran them: default / tuned / fallback …
        # whether the rows are independent (`row_buckets`), by (row parameters, shapes but the rows)
        self.independent: dict[tuple, bool] = {}
        self.dependent: set[tuple[int, ...]] = set()  # row parameters found dependent at some shape

    def key(self, args: Sequence[np.ndarray]) -> tuple:
        """What a specialisation depends on: every argument's shape and dtype, and the bytes of the
        arguments whose values a dyn op reads."""
        return tuple([(a.shape, a.dtype) for a in args]), tuple([args[i].tobytes() for i in self.values])

    def __call__(self, *args: Any) -> Any:
        arrs = args if all(type(a) is np.ndarray for a in args) else [np.asarray(a) for a in args]
        key = self.key(arrs)
        run = self.cache.get(key)
        if run is None:
            padded = self._padded_rows(arrs)
            if padded is not None:
                return self._run_padded(arrs, *padded)
            if key in self.evicted:  # evicted before its next use: keep more
                del self.evicted[key]
                self.max_entries = min(2 * self.max_entries, self.most_entries)
            static = specialize(self.fn, arrs)
            trivial = _trivial(static)
            if trivial is not None:
                run, source = trivial, "no kernel"
            else:
                run, source = self._compile_dropping_empty(static)
            self.compiled += 1
            self.sources.add(source)
            self.cache[key] = run
            if len(self.cache) > self.max_entries:
                self.evicted[self.cache.popitem(last=False)[0]] = None
                if len(self.evicted) > self.max_entries:
                    self.evicted.popitem(last=False)
        else:
            self.cache.move_to_end(key)
        return run(*arrs)

    def _padded_rows(self, arrs: Sequence[np.ndarray]) -> tuple[tuple[int, ...], int] | None:
        """(the row parameters, the rows this call runs padded to) when the function's rows are
        independent (`row_buckets`) and the count is not a bucket's. Asked once the function meets
        a second shape (the first compiles as it is), and kept per shape but for the rows."""
        if not self.cache or self.values:
            return None
        rows = row_params(self.fn, arrs)
        if rows is None or bucket(n := arrs[rows[0]].shape[0]) == n:
            return None
        key = rows, tuple(a.shape[1:] if i in rows else a.shape for i, a in enumerate(arrs))
        independent = self.independent.get(key)
        if independent is None:
            if rows in self.dependent:  # found dependent at other shapes: not asked again
                return None
            if len(self.independent) >= self.most_entries:
                self.independent.clear()
            independent = self.independent[key] = independent_rows(self.fn, arrs, rows, specialize)
            if not independent:
                self.dependent.add(rows)
        return (rows, bucket(n)) if independent else None

    def _run_padded(self, arrs: Sequence[np.ndarray], rows: tuple[int, ...], padded: int) -> Any:
        """The first n rows of the function over its row arguments padded with zeros to `padded`."""
        n = arrs[rows[0]].shape[0]
        args = list(arrs)
        for i in rows:
            args[i] = np.zeros((padded, *arrs[i].shape[1:]), arrs[i].dtype)
            args[i][:n] = arrs[i]
        out = self(*args)
        return tuple(o[:n] for o in out) if isinstance(out, tuple | list) else out[:n]

    def _compile_dropping_empty(self, static: Function) -> tuple[Callable[..., Any], str]:
        """Compile `static`, leaving out the parameters with no elements that its body no longer
        reads (a dyn op's empty axes, now an attribute): kernels cannot take empty buffers."""
        used = {id(n) for n in post_order(static.body) if isinstance(n, Var)}
        keep = [i for i, p in enumerate(static.params)
                if id(p) in used or not isinstance(p.type_annotation, TensorType)
                or 0 not in p.type_annotation.concrete_shape]
        if len(keep) == len(static.params):
            return self._compile(static)
        slim = Function(tuple(static.params[i] for i in keep), static.body, None, (), static.attrs)
        infer_expr(slim)
        run, source = self._compile(slim)
        return (lambda *args: run(*(args[i] for i in keep))), source

    @property
    def source(self) -> str:
        """The report's source: fallback if any specialisation ran NumPy references."""
        return "fallback" if {"fallback", "reference"} & self.sources else "specialized"

    @property
    def detail(self) -> str:
        got = ", ".join(sorted(self.sources)) or "none yet"
        split = "; rows padded to buckets" if any(self.independent.values()) else ""
        return f"specialises per input shape/value: {self.compiled} compiled ({got}), " \
               f"{len(self.cache)} cached (max {self.max_entries}){split}"


__all__ = ["DEFAULT_MAX_ENTRIES", "MOST_ENTRIES", "SpecializationError", "SpecializingKernel",
           "needs_specializing", "specialize", "value_params"]
