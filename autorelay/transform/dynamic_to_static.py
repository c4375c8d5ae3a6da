"""DynamicToStatic: specialise shapes once the inputs' shapes are known.

1. `input_shapes=(("x", (1, 3, 224, 224)), ...)` replaces the entry parameters' `?`/symbolic
   extents by the given ones (a given extent that contradicts a static one is an error naming the
   parameter); type inference then makes every downstream shape static where the ops allow it.
2. Ops whose result shape depends on another tensor's *type* become their static forms, dropping
   that dependency: `zeros_like`/`ones_like`/`full_like` → `zeros`/`ones`/`full`,
   `reshape_like` → `reshape`, `broadcast_to_like` → `broadcast_to`, `cast_like` → `cast`; and a
   `reshape` with special codes (`-1`, `0`, `-2`, …) gets its explicit target shape.
A rewrite happens only where the result type is fully static.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autorelay.ir.expr import Call, Expr, Function, Var
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType
from autorelay.ir.visitor import ExprMutator
from autorelay.op.registry import call
from autorelay.transform.pass_base import ModulePass, infer_module_types
from autorelay.transform.util import op_name, tensor_type, with_type


def _static_form(c: Call) -> Expr | None:
    name = op_name(c)
    t = tensor_type(c)
    if name is None or t is None or not t.is_static:
        return None
    shape = t.concrete_shape
    if name == "zeros_like":
        return call("zeros", shape=shape, dtype=t.dtype)
    if name == "ones_like":
        return call("ones", shape=shape, dtype=t.dtype)
    if name == "full_like":
        return call("full", c.args[1], shape=shape, dtype=t.dtype)
    if name == "reshape_like":
        return call("reshape", c.args[0], newshape=shape)
    if name == "broadcast_to_like":
        return call("broadcast_to", c.args[0], shape=shape)
    if name == "cast_like":
        return call("cast", c.args[0], dtype=t.dtype)
    if name == "reshape" and any(int(d) <= 0 for d in c.attrs["newshape"]):
        return call("reshape", c.args[0], newshape=shape)
    return None


class _Staticise(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.rewrites = 0

    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        assert isinstance(new, Call)
        out = _static_form(with_type(new, c))  # type: ignore[arg-type]
        if out is None:
            return new
        self.rewrites += 1
        return with_type(out, c)


def specialise_params(fn: Function, shapes: dict[str, tuple[int, ...]]) -> Function:
    """`fn` with the named parameters' annotations made static (checked against what they say)."""
    names = [p.name_hint for p in fn.params]
    unknown = sorted(set(shapes) - set(names))
    if unknown:
        raise ValueError(
            f"DynamicToStatic: no parameter(s) {', '.join(unknown)} (parameters: {', '.join(names)})"
        )
    subst: dict[int, Var] = {}
    params = []
    for p in fn.params:
        if p.name_hint not in shapes:
            params.append(p)
            continue
        shape = tuple(int(d) for d in shapes[p.name_hint])
        ann = p.type_annotation
        if isinstance(ann, TensorType):
            if len(ann.shape) != len(shape) or any(
                isinstance(a, int) and a != b for a, b in zip(ann.shape, shape)
            ):
                raise ValueError(f"DynamicToStatic: parameter %{p.name_hint} is {ann}, which cannot "
                                 f"take shape {shape}")
            new = Var(p.name_hint, TensorType(shape, ann.dtype))
        elif ann is None:
            new = Var(p.name_hint, TensorType(shape, "float32"))
        else:
            raise ValueError(f"DynamicToStatic: parameter %{p.name_hint} has non-tensor type {ann}")
        subst[id(p)] = new
        params.append(new)

    class _Rename(ExprMutator):
        def visit_var(self, v: Var) -> Expr:
            return subst.get(id(v), v)

    body = _Rename().visit(fn.body)
    return Function(tuple(params), body, None, fn.type_params, fn.attrs)


@dataclass(frozen=True)
class DynamicToStatic(ModulePass):
    """Make the entry's input shapes static and turn shape-dependent ops into static ones."""

    name: ClassVar[str] = "DynamicToStatic"
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    entry: str = "main"

    def transform_module(self, mod: IRModule) -> IRModule:
        if self.input_shapes:
            mod = mod.with_function(self.entry, specialise_params(mod[self.entry], dict(self.input_shapes)))
        mod = infer_module_types(mod, self.name, before=True)
        out = {}
        for gv, fn in mod.functions.items():
            new = fn if fn.is_primitive else _Staticise().visit(fn)
            out[gv] = new
        return IRModule(out, mod.type_definitions)
