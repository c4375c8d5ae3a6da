"""Type checking a whole module: the order globals are checked in, and polymorphism.

* A global whose parameters and return type are all annotated has a *declared* type; every use
  relies on it (instantiated fresh when it has type parameters), so its body is checked on its own
  terms and recursion through it needs nothing special.
* The other globals are grouped into strongly connected components of the "refers to" graph and
  checked callee-first with one shared solver, so a recursive or mutually recursive group is
  inferred together, and a monomorphic helper can learn its parameter types from its callers.
* A not-fully-annotated global *with* type parameters is solved as soon as its component has been
  visited and its type is then fixed (generalised over its declared type parameters); it must not
  share its component with other globals, since polymorphic mutual recursion needs annotations.
"""

from __future__ import annotations

from autorelay.errors import TypeCheckError
from autorelay.ir.expr import Expr, Function, GlobalVar
from autorelay.ir.module import IRModule
from autorelay.ir.types import FuncType, Type
from autorelay.ir.visitor import post_order
from autorelay.typing.infer import Inferencer
from autorelay.typing.solver import Solver
from autorelay.typing.unify import contains_hole, show
from autorelay.utils.deep import deep


def declared_type(f: Function) -> FuncType | None:
    """The global's type if every parameter and the return type are annotated without holes."""
    if f.ret_type is None or any(p.type_annotation is None for p in f.params):
        return None
    t = FuncType(tuple(p.type_annotation for p in f.params), f.ret_type, f.type_params)
    return None if contains_hole(t) else t


def referenced_globals(e: Expr) -> list[GlobalVar]:
    seen: dict[GlobalVar, None] = {}
    for node in post_order(e):
        if isinstance(node, GlobalVar):
            seen.setdefault(node)
    return list(seen)


def components(graph: dict[GlobalVar, list[GlobalVar]]) -> list[list[GlobalVar]]:
    """Strongly connected components, callees before callers (iterative Tarjan)."""
    index: dict[GlobalVar, int] = {}
    low: dict[GlobalVar, int] = {}
    on_stack: set[GlobalVar] = set()
    stack: list[GlobalVar] = []
    out: list[list[GlobalVar]] = []
    for root in graph:
        if root in index:
            continue
        work: list[tuple[GlobalVar, int]] = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            succs = graph[v]
            if i < len(succs):
                work.append((v, i + 1))
                w = succs[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp[::-1])
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


class ModuleChecker:
    def __init__(self, mod: IRModule, allow_free_vars: bool = False) -> None:
        self.mod = mod
        self.solver = Solver()
        self.inf = Inferencer(mod, self.solver, allow_free_vars)
        self.declared: dict[GlobalVar, FuncType] = {}
        for gv, f in mod.functions.items():
            d = declared_type(f)
            if d is not None:
                self.declared[gv] = d
                self.inf.global_types[gv] = d
            else:
                u = self.solver.unifier
                params = tuple(
                    u.fresh() if p.type_annotation is None else p.type_annotation for p in f.params
                )
                ret = u.fresh() if f.ret_type is None else f.ret_type
                self.inf.global_types[gv] = FuncType(params, ret, f.type_params)

    def check_global(self, gv: GlobalVar) -> None:
        self.inf.where = f"@{gv.name_hint}"
        f = self.mod.functions[gv]
        t = self.inf.infer(f)
        self.inf.unify(f, self.inf.global_types[gv], t, f"@{gv.name_hint}: its type vs its definition")
        self.inf.where = ""

    def check_inferred(self, only: set[GlobalVar] | None = None) -> None:
        """Check the globals without a declared type, callee-first by component."""
        pending = [
            gv for gv in self.mod.functions if gv not in self.declared and (only is None or gv in only)
        ]
        graph = {
            gv: [g for g in referenced_globals(self.mod.functions[gv]) if g in pending] for gv in pending
        }
        for comp in components(graph):
            poly = [gv for gv in comp if self.mod.functions[gv].type_params]
            if poly and len(comp) > 1:
                names = ", ".join("@" + g.name_hint for g in comp)
                raise TypeCheckError(
                    f"mutually recursive globals {names} include a polymorphic one; give them full "
                    "type annotations (parameters and return type)",
                    self.mod.functions[poly[0]].get_span(),
                )
            if poly:
                self.inf.no_instantiate = {comp[0]}
            for gv in comp:
                self.check_global(gv)
            if poly:
                self.inf.no_instantiate = set()
                self.generalise(comp[0])

    def generalise(self, gv: GlobalVar) -> None:
        self.solver.solve()
        t = self.solver.unifier.resolve(self.inf.global_types[gv])
        if contains_hole(t):
            raise TypeCheckError(
                f"cannot infer the type of polymorphic @{gv.name_hint}: only {show(t)} is known; "
                "annotate its parameters and return type",
                self.mod.functions[gv].get_span(),
            )
        self.inf.global_types[gv] = t

    def finish(self) -> None:
        self.solver.solve()
        self.solver.check_all_ran()
        self.inf.write_back()


def reachable_globals(mod: IRModule, e: Expr) -> set[GlobalVar]:
    """Globals `e` refers to, and those that globals without a declared type refer to, transitively."""
    out: set[GlobalVar] = set()
    todo = [g for g in referenced_globals(e) if g in mod.functions]
    while todo:
        g = todo.pop()
        if g in out:
            continue
        out.add(g)
        f = mod.functions[g]
        if declared_type(f) is None:
            todo.extend(x for x in referenced_globals(f) if x in mod.functions)
    return out


@deep
def infer_types(mod: IRModule | Expr) -> IRModule | Expr:
    """Type-check every global of `mod`, filling `checked_type` on every node.

    Returns a module with the same (now typed) functions and type definitions. Raises
    `TypeCheckError` naming the construct, the argument and the conflicting types, located at the
    node's span when the program came from text. Nothing is written onto the nodes on failure.
    Given an expression instead (as `relay.transform.InferType` users write), it types it with
    `infer_expr` and returns the same, now typed, expression.
    """
    if isinstance(mod, Expr):
        infer_expr(mod)
        return mod
    if not isinstance(mod, IRModule):
        raise TypeError(f"infer_types takes an IRModule or an expression, got {type(mod).__name__}")
    checker = ModuleChecker(mod)
    checker.check_inferred()
    for gv in mod.functions:
        if gv in checker.declared:
            checker.check_global(gv)
    checker.finish()
    return IRModule(mod.functions, mod.type_definitions)


@deep
def infer_expr(expr: Expr, mod: IRModule | None = None) -> Type:
    """The type of a standalone expression (free variables must be annotated), typing its nodes.

    Globals of `mod` it refers to are used at their declared types; globals without one are
    type-checked too, as their types are needed.
    """
    mod = mod if mod is not None else IRModule()
    checker = ModuleChecker(mod, allow_free_vars=True)
    checker.check_inferred(only=reachable_globals(mod, expr))
    t = checker.inf.infer(expr)
    checker.finish()
    return checker.solver.unifier.resolve(t)
