"""Bind parameter values into a module: named parameters of the entry become constants.

Zoo models and imported models keep their weights as parameters of `@main` (so one compiled
module can take new weights). Graph optimisations that fold weights (FoldConstant, FoldScaleAxis)
need them as constants; `bind_params` makes that substitution explicit.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from autorelay.ir.expr import Constant, Expr, Function, Var
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType
from autorelay.ir.visitor import ExprMutator
from autorelay.utils.deep import deep


@deep
def bind_params(mod: IRModule, params: Mapping[str, np.ndarray], entry: str = "main") -> IRModule:
    """`mod` with each named parameter of `entry` replaced by a constant holding its value."""
    fn = mod[entry]
    by_name = {p.name_hint: p for p in fn.params}
    unknown = sorted(set(params) - set(by_name))
    if unknown:
        raise KeyError(f"bind_params: @{entry} has no parameter(s) {', '.join(unknown)}")
    subst: dict[int, Constant] = {}
    for name, value in params.items():
        p = by_name[name]
        arr = np.asarray(value)
        ann = p.type_annotation
        if isinstance(ann, TensorType):
            if ann.is_static and tuple(arr.shape) != ann.concrete_shape:
                raise ValueError(f"bind_params: %{name} is {ann} but the value has shape {arr.shape}")
            arr = arr.astype(ann.dtype, copy=False)
        subst[id(p)] = Constant(arr)

    class _Bind(ExprMutator):
        def visit_var(self, v: Var) -> Expr:
            return subst.get(id(v), v)

    body = _Bind().visit(fn.body)
    params_left = tuple(p for p in fn.params if id(p) not in subst)
    return mod.with_function(entry, Function(params_left, body, fn.ret_type, fn.type_params, fn.attrs))
