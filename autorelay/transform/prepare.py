"""Preparing a module for any executor: bind weights, push loop-invariant weights into the recursive
globals, then run a named pipeline (which ends in FuseOps). `autorelay.build` prepares once and
hands the result to the graph executor, the VM or AoT; task extraction prepares the same way, so
the tuner sees exactly the kernels the build compiles.

Why the middle step: the zoo's recurrent models pass their weights through every recursive call
(`@lstm_loop(i, xs, h, c, w_ih, w_hh, bias)`). Left as parameters, the weights are kernel *inputs*,
and a dense kernel that packs its weight matrix would have to re-pack it on every step. When every
call of a global passes the same constant at a position (from `@main`, or the global's own or a
sibling global's parameter at an invariant position), that parameter is dropped and the constant
substituted, so FuseOps puts the weights inside the primitive functions and the kernels pack them
once at build time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Function, GlobalVar, Var
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator, post_order
from autorelay.transform.bind import bind_params
from autorelay.transform.pass_memo import PassMemo
from autorelay.transform.pipelines import pipeline as named_pipeline
from autorelay.utils.deep import deep


def _call_sites(mod: IRModule) -> tuple[list[tuple[GlobalVar, Call]], set[str]]:
    """Every direct call of a global (caller, call) and the names of globals used as values."""
    sites: list[tuple[GlobalVar, Call]] = []
    escaped: set[str] = set()
    for gv, fn in mod.functions.items():
        called: set[int] = set()
        nodes = post_order(fn)
        for n in nodes:
            if isinstance(n, Call) and isinstance(n.op, GlobalVar):
                sites.append((gv, n))
                called.add(id(n.op))
        for n in nodes:
            if isinstance(n, GlobalVar) and id(n) not in called:
                escaped.add(n.name_hint)
    return sites, escaped


def invariant_constants(mod: IRModule, entry: str = "main") -> dict[tuple[str, int], Constant]:
    """(global name, parameter index) -> the constant every call passes there (a fixed point)."""
    sites, escaped = _call_sites(mod)
    params = {gv.name_hint: fn.params for gv, fn in mod.functions.items()}
    value: dict[tuple[str, int], Constant] = {}
    grown = True
    while grown:  # optimistic candidates: constants, and parameters that carry one onwards
        grown = False
        for caller, c in sites:
            g = c.op.name_hint  # type: ignore[union-attr]
            if g == entry or g in escaped:
                continue
            own = {id(p): i for i, p in enumerate(params[caller.name_hint])}
            for k, a in enumerate(c.args):
                if (g, k) in value:
                    continue
                if isinstance(a, Constant) and np.asarray(a.data).size > 1:
                    value[(g, k)] = a
                    grown = True
                elif isinstance(a, Var) and (caller.name_hint, own.get(id(a), -1)) in value:
                    value[(g, k)] = value[(caller.name_hint, own[id(a)])]
                    grown = True
    changed = True
    while changed:
        changed = False
        for caller, c in sites:
            g = c.op.name_hint  # type: ignore[union-attr]
            own = {id(p): i for i, p in enumerate(params[caller.name_hint])}
            for k, a in enumerate(c.args):
                want = value.get((g, k))
                if want is None:
                    continue
                ok = a is want or (isinstance(a, Constant) and _same_data(a, want))
                if not ok and isinstance(a, Var) and id(a) in own:
                    src = value.get((caller.name_hint, own[id(a)]))
                    ok = src is not None and (src is want or _same_data(src, want))
                if not ok:
                    del value[(g, k)]
                    changed = True
    return value


def _same_data(a: Constant, b: Constant) -> bool:
    x, y = np.asarray(a.data), np.asarray(b.data)
    return x.shape == y.shape and x.dtype == y.dtype and (x is y or np.array_equal(x, y))


@deep
def specialize_invariants(mod: IRModule, entry: str = "main") -> IRModule:
    """Drop the invariant constant parameters found by `invariant_constants` (see module doc)."""
    value = invariant_constants(mod, entry)
    if not value:
        return mod
    dropped: dict[str, set[int]] = {}
    for g, k in value:
        dropped.setdefault(g, set()).add(k)

    class _Rewrite(ExprMutator):
        def __init__(self, subst: dict[int, Expr]) -> None:
            super().__init__()
            self.subst = subst

        def visit_var(self, v: Var) -> Expr:
            return self.subst.get(id(v), v)

        def visit_call(self, c: Call) -> Expr:
            new = super().visit_call(c)
            if isinstance(c.op, GlobalVar) and c.op.name_hint in dropped:
                gone = dropped[c.op.name_hint]
                assert isinstance(new, Call)
                return new.replace(args=tuple(a for i, a in enumerate(new.args) if i not in gone))
            return new

    out: dict[GlobalVar, Function] = {}
    for gv, fn in mod.functions.items():
        gone = dropped.get(gv.name_hint, set())
        subst: dict[int, Expr] = {id(p): value[(gv.name_hint, i)]
                                  for i, p in enumerate(fn.params) if i in gone}
        body = _Rewrite(subst).visit(fn.body)
        kept = tuple(p for i, p in enumerate(fn.params) if i not in gone)
        out[gv] = Function(kept, body, fn.ret_type, fn.type_params, fn.attrs)
    return IRModule(out, mod.type_definitions)


def prepare(mod: IRModule | Function, params: Mapping[str, np.ndarray] | None = None,
            pipeline: str | Any = "default", entry: str = "main", memo: PassMemo | None = None) -> IRModule:
    """Bind `params`, specialise invariant weights, run `pipeline` (a name or Pipeline value).
    `memo`: the bound module and the results of the pipeline's first passes are shared with the
    other preparations of the same `mod` and `params` through it (`PassMemo`)."""
    pipe = named_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    if memo is None:
        return pipe(_bound(mod, params, entry))
    return pipe(memo.source((mod, params, entry), lambda: _bound(mod, params, entry)), memo)


def _bound(mod: IRModule | Function, params: Mapping[str, np.ndarray] | None, entry: str) -> IRModule:
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod, entry)
    if params:
        if entry not in mod:
            raise ValueError(f"params given, but the module has no @{entry} function to bind them to")
        mod = bind_params(mod, params, entry)
    return specialize_invariants(mod, entry)
