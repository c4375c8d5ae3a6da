"""Fix the dynamic input shapes of `@main` to concrete ones: `bind_shapes(mod, {"x": (4, 3, 224, 224)})`.

A model exported with a symbolic batch (`Tensor[(batch, 3, 224, 224), float32]`) type-checks with
the symbol, but the graph executor plans memory for static shapes. Binding gives every input the
concrete shape it is called with; the same extent symbol used by several inputs must get the same
value, and a static extent must match. Types of everything else are inferred anew by the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autorelay.errors import AutoRelayError
from autorelay.ir.expr import Expr, Function, Var
from autorelay.ir.module import IRModule
from autorelay.ir.types import SymDim, TensorType
from autorelay.ir.visitor import ExprMutator


class ShapeBindError(AutoRelayError, ValueError):
    """A shape that does not fit the input it is given for; names the input and both shapes."""


def dynamic_inputs(mod: IRModule, entry: str = "main") -> list[str]:
    """Names of `@entry`'s tensor inputs whose annotated shape is not static."""
    return [p.name_hint for p in mod[entry].params
            if isinstance(p.type_annotation, TensorType) and not p.type_annotation.is_static]


def bind_shapes(mod: IRModule, shapes: Mapping[str, Sequence[int]], entry: str = "main") -> IRModule:
    """`mod` with `@entry`'s inputs named in `shapes` annotated with those static shapes."""
    fn = mod[entry]
    names = {p.name_hint for p in fn.params}
    unknown = sorted(set(shapes) - names)
    if unknown:
        raise ShapeBindError(f"shapes given for unknown input(s) {', '.join(unknown)} of @{entry} "
                             f"(inputs: {', '.join(p.name_hint for p in fn.params)})")
    symbols: dict[str, int] = {}
    subst: dict[int, Var] = {}
    params = []
    for p in fn.params:
        t = p.type_annotation
        if p.name_hint not in shapes:
            params.append(p)
            continue
        want = tuple(int(d) for d in shapes[p.name_hint])
        if not isinstance(t, TensorType):
            raise ShapeBindError(f"input %{p.name_hint} has type {t}, not a tensor: it takes no shape")
        if len(want) != len(t.shape):
            raise ShapeBindError(f"input %{p.name_hint}: shape {want} has rank {len(want)}, the model's "
                                 f"{t} has rank {len(t.shape)}")
        for d, w in zip(t.shape, want):
            if isinstance(d, int) and d != w:
                raise ShapeBindError(f"input %{p.name_hint}: shape {want} does not fit the model's {t}")
            if isinstance(d, SymDim) and symbols.setdefault(d.name, w) != w:
                raise ShapeBindError(f"input %{p.name_hint}: extent {d.name} is {symbols[d.name]} in an "
                                     f"earlier input but {w} here")
            if w < 0:
                raise ShapeBindError(f"input %{p.name_hint}: negative extent in shape {want}")
        new = Var(p.name_hint, TensorType(want, t.dtype))
        subst[id(p)] = new
        params.append(new)

    class _Rebind(ExprMutator):
        def visit_var(self, v: Var) -> Expr:
            return subst.get(id(v), v)

    body = _Rebind().visit(fn.body)
    out = dict(mod.functions)
    gv = next(g for g in mod.functions if g.name_hint == entry)
    out[gv] = Function(tuple(params), body, None, fn.type_params, fn.attrs)
    return IRModule(out, mod.type_definitions)


__all__ = ["ShapeBindError", "bind_shapes", "dynamic_inputs"]
