"""Continuation frames of the reference interpreter's machine (see `autorelay.runtime.interpreter`).

A frame stands for "what to do with the value of a sub-expression". The machine talks to a frame
through two methods, both returning a triple `(code, a, b)`:

* `start()` — called once when the frame is created;
* `resume(value)` — called with the value of the child the frame asked for.

`code` is `VALUE` (the frame is done; `a` is its value), `CHILD` (evaluate expression `a` in
environment `b`, then resume this frame) or `TAIL` (the frame is done; continue by evaluating `a` in
`b` in its place — how let bodies, if branches and match arms run without growing the stack).

The frames of calls are in `autorelay.runtime.interp_calls`; the machine's table of which frame
starts which node is `interpreter._STARTERS`.

Frames evaluate variable and constant operands inline rather than asking the machine for them:
that is most operands, and it keeps the per-node overhead of dataflow programs low.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from autorelay.errors import InterpreterError
from autorelay.ir.expr import (
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    Let,
    Op,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    Var,
)
from autorelay.runtime.values import (
    Closure,
    ConstructorValue,
    RefValue,
    format_value,
)

if TYPE_CHECKING:
    from autorelay.runtime.interpreter import Interpreter

VALUE, CHILD, TAIL = 0, 1, 2
MISSING = object()
_LEAVES = (GlobalVar, Op, Constructor)  # structural-equality nodes: never memoised, cheap to evaluate


def located(node: Any, message: str) -> str:
    span = node.get_span() if node is not None and hasattr(node, "get_span") else None
    return f"{span}: {message}" if span is not None else message


class Frame:
    __slots__ = ("env", "interp", "node")
    memo = False  # store the frame's value in `env` under `node` (graph-form sharing)

    def __init__(self, interp: Interpreter, node: Any, env: dict[Any, Any]) -> None:
        self.interp = interp
        self.node = node
        self.env = env

    def start(self) -> tuple[int, Any, Any]:
        raise NotImplementedError

    def resume(self, value: Any) -> tuple[int, Any, Any]:
        raise NotImplementedError


def operand(node: Expr, env: dict[Any, Any]) -> Any:
    """The value of `node` if it can be had without evaluating anything, else `MISSING`."""
    t = type(node)
    if t is Var:
        try:
            return env[node]
        except KeyError:
            raise InterpreterError(located(node, f"unbound variable %{node.name_hint}")) from None
    if t is Constant:
        return node.data
    if t in _LEAVES:
        return MISSING
    return env.get(node, MISSING)


# ---- binding forms ----------------------------------------------------------------------------


class LetFrame(Frame):
    """A whole chain of lets: binds each value and moves on; the final body runs in tail position."""

    __slots__ = ()

    def start(self) -> tuple[int, Any, Any]:
        env = self.env
        node = self.node
        while True:
            value_expr = node.value
            t = type(value_expr)
            if t is Function:
                v: Any = self.interp.make_closure(value_expr, env)
                env[value_expr] = v
            else:
                v = operand(value_expr, env)
                if v is MISSING:
                    self.node = node
                    return CHILD, value_expr, env
            self._bind(node, v)
            node = node.body
            if type(node) is not Let:
                return TAIL, node, env

    def resume(self, value: Any) -> tuple[int, Any, Any]:
        node = self.node
        self._bind(node, value)
        if type(node.body) is Let:
            self.node = node.body
            return self.start()
        return TAIL, node.body, self.env

    def _bind(self, node: Let, value: Any) -> None:
        self.env[node.var] = value
        # `let %f = fn (...) { ... %f(...) ... }` may call itself: tie the knot.
        if type(value) is Closure and value.fn is node.value and node.var in self.interp.fn_info(value.fn)[1]:
            value.env[node.var] = value


class IfFrame(Frame):
    __slots__ = ()

    def start(self) -> tuple[int, Any, Any]:
        cond = operand(self.node.cond, self.env)
        if cond is MISSING:
            return CHILD, self.node.cond, self.env
        return self.resume(cond)

    def resume(self, value: Any) -> tuple[int, Any, Any]:
        if not (isinstance(value, np.ndarray | np.bool_) and value.dtype == np.bool_ and value.size == 1
                and np.ndim(value) == 0):
            raise InterpreterError(located(
                self.node, f"if: the condition must be a boolean scalar, got {format_value(value)}"))
        return TAIL, self.node.true_branch if bool(value) else self.node.false_branch, self.env


class MatchFrame(Frame):
    __slots__ = ()

    def start(self) -> tuple[int, Any, Any]:
        data = operand(self.node.data, self.env)
        if data is MISSING:
            return CHILD, self.node.data, self.env
        return self.resume(data)

    def resume(self, value: Any) -> tuple[int, Any, Any]:
        env = self.env
        for clause in self.node.clauses:
            if match_pattern(clause.lhs, value, env):
                return TAIL, clause.rhs, env
        kind = "match" if self.node.complete else "match?"
        raise InterpreterError(located(
            self.node, f"{kind}: no clause matches the value {format_value(value)}"))


def match_pattern(p: Pattern, v: Any, env: dict[Any, Any]) -> bool:
    """Does `v` match `p`? Binds the pattern's variables into `env` as it goes."""
    t = type(p)
    if t is PatternVar:
        env[p.var] = v
        return True
    if t is PatternWildcard:
        return True
    if t is PatternConstructor:
        if type(v) is not ConstructorValue:
            return False
        pc, vc = p.constructor, v.constructor
        if pc is not vc and (pc.name != vc.name or pc.belong_to.name != vc.belong_to.name):
            return False
        if len(p.patterns) != len(v.fields):
            return False
        return all(match_pattern(sp, sv, env) for sp, sv in zip(p.patterns, v.fields))
    if t is PatternTuple:
        if not isinstance(v, tuple) or len(v) != len(p.patterns):
            return False
        return all(match_pattern(sp, sv, env) for sp, sv in zip(p.patterns, v))
    raise InterpreterError(f"unknown pattern {type(p).__name__}")


# ---- data ----------------------------------------------------------------------------------


class TupleFrame(Frame):
    __slots__ = ("i", "vals")
    memo = True

    def start(self) -> tuple[int, Any, Any]:
        self.vals: list[Any] = []
        self.i = 0
        return self._next()

    def resume(self, value: Any) -> tuple[int, Any, Any]:
        self.vals.append(value)
        self.i += 1
        return self._next()

    def _next(self) -> tuple[int, Any, Any]:
        fields = self.node.fields
        while self.i < len(fields):
            v = operand(fields[self.i], self.env)
            if v is MISSING:
                return CHILD, fields[self.i], self.env
            self.vals.append(v)
            self.i += 1
        return VALUE, tuple(self.vals), None


class UnaryFrame(Frame):
    """Nodes with one operand: projection and the reference forms."""

    __slots__ = ()
    memo = True

    def start(self) -> tuple[int, Any, Any]:
        child = self.child()
        v = operand(child, self.env)
        if v is MISSING:
            return CHILD, child, self.env
        return self.resume(v)

    def child(self) -> Expr:
        raise NotImplementedError


class TupleGetItemFrame(UnaryFrame):
    __slots__ = ()

    def child(self) -> Expr:
        return self.node.tuple_value

    def resume(self, value: Any) -> tuple[int, Any, Any]:
        if not isinstance(value, tuple):
            raise InterpreterError(located(self.node, f"projection .{self.node.index} of a non-tuple "
                                                      f"value {format_value(value)}"))
        try:
            return VALUE, value[self.node.index], None
        except IndexError:
            raise InterpreterError(located(
                self.node, f"projection .{self.node.index} of a {len(value)}-tuple")) from None


class RefCreateFrame(UnaryFrame):
    __slots__ = ()

    def child(self) -> Expr:
        return self.node.value

    def resume(self, value: Any) -> tuple[int, Any, Any]:
        return VALUE, RefValue(value), None


class RefReadFrame(UnaryFrame):
    __slots__ = ()

    def child(self) -> Expr:
        return self.node.ref

    def resume(self, value: Any) -> tuple[int, Any, Any]:
        if type(value) is not RefValue:
            raise InterpreterError(located(self.node, f"ref_read of a non-reference {format_value(value)}"))
        return VALUE, value.value, None


class RefWriteFrame(Frame):
    __slots__ = ("ref",)
    memo = True

    def start(self) -> tuple[int, Any, Any]:
        self.ref = MISSING
        v = operand(self.node.ref, self.env)
        if v is MISSING:
            return CHILD, self.node.ref, self.env
        return self.resume(v)

    def resume(self, value: Any) -> tuple[int, Any, Any]:
        if self.ref is MISSING:
            if type(value) is not RefValue:
                raise InterpreterError(located(
                    self.node, f"ref_write to a non-reference {format_value(value)}"))
            self.ref = value
            value = operand(self.node.value, self.env)
            if value is MISSING:
                return CHILD, self.node.value, self.env
        self.ref.value = value
        return VALUE, (), None
