"""Constraint generation: walk an expression, give every node a (possibly incomplete) type.

Each node's type is recorded; nothing is written onto the nodes until the whole module has been
solved (`Inferencer.write_back`), so a failed check leaves the program untouched and no node
ever carries a half-known type.

Value-like nodes that compare by value (`GlobalVar`, `Constructor`, `Op`) may be shared between
many uses, so they are not memoised: each use of a polymorphic global or constructor gets its
own instantiation. Their recorded checked type is use-independent where possible (the generic
type of a global or constructor); an `Op` node records the instantiated `fn` type of its call.
"""

from __future__ import annotations

from collections.abc import Callable

from autorelay.errors import TypeCheckError
from autorelay.ir.expr import (
    Call,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Node,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from autorelay.ir.module import IRModule
from autorelay.ir.types import (
    FuncType,
    IncompleteType,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeData,
)
from autorelay.op import registry
from autorelay.typing.patterns import check_pattern
from autorelay.typing.solver import OpRelation, Projection, Solver
from autorelay.typing.unify import UnifyError, contains_hole, instantiate, join, show

BOOL_SCALAR = TensorType((), "bool")


def describe(node: Node) -> str:
    """How a message names a construct."""
    if isinstance(node, Var):
        return f"variable %{node.name_hint}"
    if isinstance(node, GlobalVar):
        return f"@{node.name_hint}"
    if isinstance(node, Constructor):
        return f"constructor {node.name}"
    if isinstance(node, Op):
        return f"operator {node.name}"
    if isinstance(node, Call):
        if isinstance(node.op, Op | GlobalVar | Constructor | Var):
            return f"call of {describe(node.op).split(' ')[-1]}"
        return "call"
    if isinstance(node, TupleGetItem):
        return f"tuple projection .{node.index}"
    names = {
        Function: "function", Let: "let", If: "if", Tuple: "tuple", Match: "match",
        RefCreate: "ref", RefRead: "ref_read", RefWrite: "ref_write",
    }
    return names.get(type(node), type(node).__name__)


class Inferencer:
    """Types the expressions of one module with one solver (so globals can refer to each other)."""

    def __init__(self, mod: IRModule, solver: Solver, allow_free_vars: bool = False) -> None:
        self.mod = mod
        self.solver = solver
        self.u = solver.unifier
        self.allow_free_vars = allow_free_vars
        self.global_types: dict[GlobalVar, Type] = {}
        self.no_instantiate: set[GlobalVar] = set()  # a polymorphic global while its body is checked
        self.var_types: dict[Var, Type] = {}
        # id(node) -> (node, type, enclosing global); insertion order is visit order.
        self.records: dict[int, tuple[Node, Type, str]] = {}
        self.op_calls: list[tuple[Op, list[Type], Type, str]] = []
        self.where = ""

    # ---- helpers ------------------------------------------------------------------------

    def error(self, node: Node, message: str) -> TypeCheckError:
        suffix = f" (in {self.where})" if self.where else ""
        return TypeCheckError(message + suffix, node.get_span())

    def unify(self, node: Node, a: Type, b: Type, what: str) -> None:
        """Unify, or raise naming the construct: `what: <a> vs <b> (detail)`."""
        self._meet(self.u.unify, node, a, b, what)

    def subsume(self, node: Node, expected: Type, given: Type, what: str) -> None:
        """Like `unify`, where a value of type `given` is used at `expected`: a polymorphic
        function is instantiated to fit a less polymorphic function type (`Unifier.subsume`)."""
        self._meet(self.u.subsume, node, expected, given, what)

    def _meet(self, how: Callable[[Type, Type], None], node: Node, a: Type, b: Type, what: str) -> None:
        try:
            how(a, b)
        except UnifyError as e:
            raise self.error(
                node, f"{what}: {show(self.u.resolve(a))} vs {show(self.u.resolve(b))} ({e.detail})"
            ) from None

    @staticmethod
    def site(node: Expr, fallback: Node) -> Node:
        """Where to locate an error about `node`: itself if it has a span of its own, else `fallback`.

        Variables, globals, constructors and ops are shared by all their uses, so their span is
        the definition, not the use; an error at a use is located at the enclosing construct.
        """
        if isinstance(node, Var | GlobalVar | Constructor | Op) or node.get_span() is None:
            return fallback
        return node

    def record(self, node: Node, t: Type) -> None:
        self.records[id(node)] = (node, t, self.where)

    def bind_var(self, v: Var) -> Type:
        t = self.var_types.get(v)
        if t is None:
            t = v.type_annotation if v.type_annotation is not None else self.u.fresh()
            self.var_types[v] = t
            self.record(v, t)
        return t

    def type_data(self, node: Node, ctor: Constructor) -> TypeData:
        td = self.mod.type_definitions.get(ctor.belong_to)
        if td is None:
            raise self.error(
                node, f"constructor {ctor.name} belongs to type {ctor.belong_to.name}, "
                "which the module does not define"
            )
        return td

    def constructor_type(self, node: Node, ctor: Constructor) -> FuncType:
        """`fn [vars](inputs) -> Adt[vars]`: polymorphic over the ADT's type variables."""
        td = self.type_data(node, ctor)
        return FuncType(ctor.inputs, TypeCall(td.header, td.type_vars), td.type_vars)

    def global_type(self, g: GlobalVar) -> Type:
        t = self.global_types.get(g)
        if t is None:
            raise self.error(g, f"unknown global function @{g.name_hint}")
        return t

    # ---- dispatch -----------------------------------------------------------------------

    def infer(self, e: Expr) -> Type:
        """The type of `e` (holes allowed); every sub-expression is recorded on the way."""
        if isinstance(e, Var):
            return self.visit_var(e)
        if isinstance(e, GlobalVar):
            t = self.global_type(e)
            self.record(e, t)
            if isinstance(t, FuncType) and e not in self.no_instantiate:
                return instantiate(t)
            return t
        if isinstance(e, Constructor):
            return self.constructor_value(e)
        if isinstance(e, Op):
            raise self.error(e, f"operator {e.name} used as a value; operators can only be called")
        hit = self.records.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        method = _DISPATCH.get(type(e))
        if method is None:
            raise TypeError(f"not an expression: {type(e).__name__}")
        t = method(self, e)
        self.record(e, t)
        return t

    def visit_var(self, v: Var) -> Type:
        t = self.var_types.get(v)
        if t is None:
            if not self.allow_free_vars:
                raise self.error(v, f"unbound variable %{v.name_hint} (free variables are not allowed here)")
            if v.type_annotation is not None:
                t = self.bind_var(v)
            elif v.has_checked_type:  # typed by an earlier inference (a pass re-typing a piece)
                t = self.var_types[v] = v.checked_type
                self.record(v, t)
            else:
                raise self.error(v, f"free variable %{v.name_hint} has no type annotation")
        return t

    def constructor_value(self, c: Constructor) -> Type:
        """A constructor not in call position: a function value, or the value itself if nullary."""
        generic = self.constructor_type(c, c)
        if not c.inputs:
            # One Constructor object may be shared by every use, so it records the use-independent
            # `Adt[vars]` (e.g. Nil : List[A]); each use gets a fresh instance.
            self.record(c, generic.ret_type)
            return instantiate(generic).ret_type
        self.record(c, generic)
        return instantiate(generic)

    def visit_constant(self, c: Constant) -> Type:
        return c.type

    def visit_tuple(self, t: Tuple) -> Type:
        return TupleType(tuple(self.infer(f) for f in t.fields))

    def visit_tuple_getitem(self, t: TupleGetItem) -> Type:
        tt = self.infer(t.tuple_value)
        if t.index < 0:
            raise self.error(t, f"tuple projection .{t.index}: negative index")
        ret = self.u.fresh()
        self.solver.add(Projection(t, self.where, tuple_type=tt, index=t.index, ret=ret))
        return ret

    def visit_function(self, f: Function) -> Type:
        params = tuple(self.bind_var(p) for p in f.params)
        body = self.infer(f.body)
        ret = body
        if f.ret_type is not None:
            self.subsume(f, f.ret_type, body, "function: return type annotation vs body type")
            ret = f.ret_type
        return FuncType(params, ret, f.type_params)

    def visit_let(self, let: Let) -> Type:
        chain: list[Let] = []
        node: Expr = let
        while isinstance(node, Let) and (node is let or id(node) not in self.records):
            var_t = self.bind_var(node.var)
            value_t = self.infer(node.value)
            self.subsume(node, var_t, value_t, f"let %{node.var.name_hint}: annotated type vs value type")
            chain.append(node)
            node = node.body
        body = self.infer(node)
        for inner in chain[1:]:
            self.record(inner, body)
        return body

    def visit_if(self, i: If) -> Type:
        cond = self.infer(i.cond)
        try:
            self.u.unify(cond, BOOL_SCALAR)
        except UnifyError:
            raise self.error(
                self.site(i.cond, i),
                f"if: condition must be a bool scalar Tensor[(), bool], got {show(self.u.resolve(cond))}",
            ) from None
        then_t = self.infer(i.true_branch)
        else_t = self.infer(i.false_branch)
        self.unify(i, then_t, else_t, "if: the branches have different types (then vs else)")
        return join(self.u.resolve(then_t), self.u.resolve(else_t))

    def visit_match(self, m: Match) -> Type:
        data = self.infer(m.data)
        ret: Type | None = None
        for k, clause in enumerate(m.clauses):
            check_pattern(self, clause.lhs, data)
            t = self.infer(clause.rhs)
            if ret is None:
                ret = t
            else:
                self.unify(m, ret, t, f"match: clause {k} has a different type from clause 0")
                ret = join(self.u.resolve(ret), self.u.resolve(t))
        if ret is None:
            raise self.error(m, "match with no clauses")
        return ret

    def visit_ref_create(self, r: RefCreate) -> Type:
        return RefType(self.infer(r.value))

    def visit_ref_read(self, r: RefRead) -> Type:
        t = self.infer(r.ref)
        value = self.u.fresh()
        self.unify(r, t, RefType(value), "ref_read of a non-reference")
        return value

    def visit_ref_write(self, r: RefWrite) -> Type:
        t = self.infer(r.ref)
        v = self.infer(r.value)
        self.unify(r, t, RefType(v), "ref_write: reference type vs written value")
        return TupleType(())

    # ---- calls --------------------------------------------------------------------------

    def visit_call(self, c: Call) -> Type:
        callee = c.op
        if isinstance(callee, Op):
            return self.op_call(c, callee)
        if isinstance(callee, GlobalVar):
            generic = self.global_type(callee)
            self.record(callee, generic)
            name = f"@{callee.name_hint}"
            if callee in self.no_instantiate:
                ftype: Type = generic
            else:
                ftype = self.instantiate_at(c, generic, name)
        elif isinstance(callee, Constructor):
            generic = self.constructor_type(c, callee)
            self.record(callee, generic)
            name = f"constructor {callee.name}"
            ftype = self.instantiate_at(c, generic, name)
        else:
            name = f"%{callee.name_hint}" if isinstance(callee, Var) else "the called function"
            ftype = self.u.find(self.infer(callee))
            ftype = self.instantiate_at(c, ftype, name)
        known = self.u.find(ftype)
        params = known.arg_types if isinstance(known, FuncType) else ()
        args = [self.infer_arg(a, params[k] if k < len(params) else None) for k, a in enumerate(c.args)]
        ftype = self.u.find(ftype)
        if not isinstance(ftype, FuncType):
            ret = self.u.fresh()
            self.unify(c, ftype, FuncType(tuple(args), ret), f"call of {name}: callee is not a function")
            return ret
        if len(ftype.arg_types) != len(args):
            raise self.error(
                c, f"call of {name}: expects {len(ftype.arg_types)} argument(s), got {len(args)} "
                f"(callee type {show(self.u.resolve(ftype))})"
            )
        for k, (param, arg) in enumerate(zip(ftype.arg_types, args)):
            what = f"call of {name}: argument {k} (expected vs given)"
            self.subsume(self.site(c.args[k], c), param, arg, what)
        return ftype.ret_type

    def infer_arg(self, arg: Expr, param: Type | None) -> Type:
        """An argument's type. A polymorphic global passed for a polymorphic parameter keeps its
        type parameters (`subsume` matches them to the parameter's); otherwise it is
        instantiated, as at any other use."""
        if isinstance(arg, GlobalVar) and param is not None and arg not in self.no_instantiate:
            expected, generic = self.u.find(param), self.global_type(arg)
            if isinstance(expected, FuncType) and expected.type_params and isinstance(generic, FuncType):
                self.record(arg, generic)
                return generic
        return self.infer(arg)

    def instantiate_at(self, c: Call, t: Type, name: str) -> Type:
        if not (isinstance(t, FuncType) and t.type_params):
            if c.type_args:
                raise self.error(c, f"call of {name}: type arguments given to a non-polymorphic function")
            return t
        try:
            return instantiate(t, c.type_args)
        except UnifyError as e:
            raise self.error(c, f"call of {name}: {e.detail}") from None

    def op_call(self, c: Call, op: Op) -> Type:
        try:
            opdef = registry.get(op.name)
        except KeyError:
            raise self.error(c, f"unknown operator {op.name}") from None
        if len(c.args) != opdef.num_args:
            raise self.error(
                c, f"{op.name} takes {opdef.num_args} argument(s) ({', '.join(opdef.arg_names)}), "
                f"got {len(c.args)}"
            )
        attrs = c.attrs
        if set(attrs) != set(opdef.attrs):  # built without registry.call: validate and default
            try:
                attrs = opdef.make_attrs(attrs)
            except TypeCheckError as e:
                raise self.error(c, e.message) from e
        args = [self.infer(a) for a in c.args]
        ret = self.u.fresh()
        self.op_calls.append((op, args, ret, self.where))
        self.solver.add(OpRelation(c, self.where, opdef=opdef, attrs=attrs, args=args, ret=ret))
        return ret

    # ---- results ------------------------------------------------------------------------

    def resolved_records(self) -> list[tuple[Node, Type]]:
        """Every recorded node with its solved type; raise naming the first one left unknown."""
        out: list[tuple[Node, Type]] = []
        for op, args, ret, where in self.op_calls:
            self.records[id(op)] = (op, FuncType(tuple(args), ret), where)
        for node, t, where in self.records.values():
            rt = self.u.resolve(t)
            if contains_hole(rt):
                self.where = where
                known = "" if isinstance(rt, IncompleteType) else f" (only {show(rt)} is known)"
                raise self.error(
                    node, f"cannot infer the type of {describe(node)}{known}; add a type annotation"
                )
            out.append((node, rt))
        return out

    def write_back(self) -> None:
        """Set `checked_type` on every recorded node (after `resolved_records` found no holes)."""
        for node, t in self.resolved_records():
            node.set_checked_type(t)


_DISPATCH = {
    Constant: Inferencer.visit_constant,
    Call: Inferencer.visit_call,
    Function: Inferencer.visit_function,
    Let: Inferencer.visit_let,
    If: Inferencer.visit_if,
    Tuple: Inferencer.visit_tuple,
    TupleGetItem: Inferencer.visit_tuple_getitem,
    Match: Inferencer.visit_match,
    RefCreate: Inferencer.visit_ref_create,
    RefRead: Inferencer.visit_ref_read,
    RefWrite: Inferencer.visit_ref_write,
}
