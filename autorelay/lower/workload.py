"""Workload keys and descriptions: how the tuning log names a kernel — the one place that does.

`workload_key(fn)` names a fused primitive function: what `autorelay.build` asks the log about and
what a model's tuning tasks are filed under (`search.extract`). `compute_key(cdef, template)` names
a bare compute that has no function behind it (a kernel tuned on its own: benchmarks, experiments,
`search.task.kernel_task`); it never meets a build's lookup, so the two cannot disagree.

The key is the structural hash of the primitive function with its tensor constants replaced by
typed parameters (two layers with the same shapes but different weights are one workload; a scalar
constant such as relu6's bound changes the computation and stays), plus its input/output shapes
and dtypes. The description is the JSON dict the log stores so that a schedule can be transferred
to the nearest tuned workload of the same family (`tuning_db.source.shape_distance`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Function, Op, Var
from autorelay.ir.module import IRModule
from autorelay.ir.structural import structural_hash
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.ir.visitor import ExprMutator, post_order
from autorelay.lower.lower import anchor_op
from autorelay.schedule.apply import apply
from autorelay.te.tensor import ComputeDef
from autorelay.tir.printer import structural_hash as tir_hash
from autorelay.utils.deep import deep


def _canonical(fn: Function) -> tuple[Function, list[TensorType]]:
    """`fn` with every tensor constant (size > 1) lifted to an extra typed parameter."""
    lifted: list[Var] = []
    types: list[TensorType] = []

    class _Lift(ExprMutator):
        def visit_constant(self, c: Constant) -> Expr:
            arr = np.asarray(c.data)
            if arr.size <= 1:
                return c
            t = TensorType(tuple(arr.shape), str(arr.dtype))
            v = Var(f"w{len(lifted)}", t)
            lifted.append(v)
            types.append(t)
            return v

    body = _Lift().visit(fn.body)
    return Function((*fn.params, *lifted), body, fn.ret_type, fn.type_params), types


def _shape_list(t: Type | None) -> list[Any]:
    if isinstance(t, TensorType):
        return [[int(d) if isinstance(d, int) else str(d) for d in t.shape]]
    if isinstance(t, TupleType):
        return [s for f in t.fields for s in _shape_list(f)]
    return [[str(t)]]


def _dtype_list(t: Type | None) -> list[str]:
    if isinstance(t, TensorType):
        return [t.dtype]
    if isinstance(t, TupleType):
        return [d for f in t.fields for d in _dtype_list(f)]
    return ["?"]


def _param_types(fn: Function) -> list[Type | None]:
    return [p.type_annotation or (p.checked_type if p.has_checked_type else None) for p in fn.params]


def _ret_type(fn: Function) -> Type | None:
    return fn.ret_type or (fn.body.checked_type if fn.body.has_checked_type else None)


@deep
def workload_key(fn: Function) -> str:
    """A stable hex key for a primitive function: same structure + shapes + dtypes -> same key."""
    canon, consts = _canonical(fn)
    types = [*_param_types(fn), *consts, _ret_type(fn)]
    sig = ";".join(f"{_shape_list(t)}:{_dtype_list(t)}" for t in types)
    text = f"{structural_hash(canon)}|{sig}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple | list):
        return [_jsonable(x) for x in v]
    if isinstance(v, int | float | str | bool) or v is None:
        return v
    if isinstance(v, np.generic):
        return v.item()
    return str(v)


@deep
def describe_workload(fn: Function) -> dict[str, Any]:
    """`{"family", "shapes", "dtypes", "attrs", "ops"}` of a primitive function, for the tuning log.

    shapes/dtypes list the inputs (parameters, then tensor constants) and then the outputs.
    """
    _, consts = _canonical(fn)
    family = anchor_op(fn)
    attrs: dict[str, Any] = {}
    ops: list[str] = []
    for n in post_order(fn.body):
        if isinstance(n, Call) and isinstance(n.op, Op):
            ops.append(n.op.name)
            if n.op.name == family and not attrs:
                attrs = {k: _jsonable(v) for k, v in n.attrs.items()}
    types = [*_param_types(fn), *consts, _ret_type(fn)]
    return {
        "family": family,
        "shapes": [s for t in types for s in _shape_list(t)],
        "dtypes": [d for t in types for d in _dtype_list(t)],
        "attrs": attrs,
        "ops": ops,
    }


@deep
def model_key(mod: IRModule) -> str:
    """A stable hex key for a whole model as the user hands it to `build` (before weights are bound
    and passes run): the log files the pipeline a model was tuned with under it, so a later build of
    the same network finds that choice. Weights do not enter it (they are parameters or constants
    of the same types either way)."""
    canon = [f"{gv.name_hint}:{structural_hash(_canonical(fn)[0])}"
             for gv, fn in sorted(mod.functions.items(), key=lambda kv: kv[0].name_hint)]
    return hashlib.sha256("|".join(canon).encode()).hexdigest()[:32]


def compute_key(cdef: ComputeDef, template: str) -> str:
    """Stable across processes and sessions: the structural hash of the compute's naive lowering
    (which spells out every loop extent, index expression, buffer shape and dtype) plus the template."""
    func, _ = apply(cdef, ())
    return f"{template}/{tir_hash(func, 'workload:' + template)[:24]}"
