"""Call frames of the reference interpreter's machine (`autorelay.runtime.interp_frames` has the
protocol and the other frames): a call evaluates its callee unless it is an operator, a global or
a constructor, then its arguments, then applies the value: a closure's body runs as the frame's
child, an operator runs its NumPy reference (`run_op`, which the compiled executors' fallback
calls too), a constructor builds its value."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from autorelay.errors import InterpreterError
from autorelay.ir.expr import Call, Constructor, Expr, GlobalVar, Op
from autorelay.op.registry import OpDef
from autorelay.op.registry import get as get_op
from autorelay.runtime.interp_frames import CHILD, MISSING, VALUE, Frame, located, operand
from autorelay.runtime.values import Closure, ConstructorFn, ConstructorValue, OpValue, format_value

if TYPE_CHECKING:
    from autorelay.runtime.interpreter import Interpreter

_CALLEE, _ARGS, _BODY = 0, 1, 2
_opdefs: dict[str, OpDef] = {}


def _opdef(name: str, site: Expr | None) -> OpDef:
    opdef = _opdefs.get(name)
    if opdef is None:
        try:
            opdef = get_op(name)
        except KeyError:
            raise InterpreterError(located(site, f"call of unknown operator {name!r}")) from None
        if opdef.reference is None:
            raise InterpreterError(located(site, f"operator {name} has no reference implementation"))
        _opdefs[name] = opdef
    return opdef


class CallFrame(Frame):
    """`f(args)`: evaluate the callee (unless it is an op, global or constructor), then the args."""

    __slots__ = ("fn", "i", "phase", "vals")
    memo = True

    def __init__(self, interp: Interpreter, node: Call, env: dict[Any, Any]) -> None:
        super().__init__(interp, node, env)
        self.vals: list[Any] = []
        self.i = 0
        self.fn: Any = None
        self.phase = _ARGS

    def start(self) -> tuple[int, Any, Any]:
        callee = self.node.op
        t = type(callee)
        if t is Op or t is Constructor:
            self.fn = callee
        elif t is GlobalVar:
            self.fn = self.interp.global_value(callee)
        else:
            fn = operand(callee, self.env)
            if fn is MISSING:
                self.phase = _CALLEE
                return CHILD, callee, self.env
            self.fn = fn
        return self._next_arg()

    def resume(self, value: Any) -> tuple[int, Any, Any]:
        phase = self.phase
        if phase == _ARGS:
            self.vals.append(value)
            self.i += 1
            return self._next_arg()
        if phase == _BODY:
            return VALUE, value, None
        self.fn = value
        self.phase = _ARGS
        return self._next_arg()

    def _next_arg(self) -> tuple[int, Any, Any]:
        args = self.node.args
        vals = self.vals
        env = self.env
        n = len(args)
        i = self.i
        while i < n:
            a = args[i]
            v = operand(a, env)
            if v is MISSING:
                self.i = i
                return CHILD, a, env
            vals.append(v)
            i += 1
        self.i = i
        return self.apply()

    def apply(self) -> tuple[int, Any, Any]:
        fn = self.fn
        t = type(fn)
        if t is Closure:
            env = self.interp.bind_params(fn, self.vals, self.node)
            self.phase = _BODY
            return CHILD, fn.fn.body, env
        if t is Op:
            return VALUE, run_op(fn.name, self.node.attrs, self.vals, self.node), None
        if t is OpValue:
            return VALUE, run_op(fn.name, None, self.vals, self.node), None
        if t is Constructor or t is ConstructorFn:
            con = fn if t is Constructor else fn.constructor
            if len(self.vals) != len(con.inputs):
                msg = f"constructor {con.name} takes {len(con.inputs)} field(s), got {len(self.vals)}"
                raise InterpreterError(located(self.node, msg))
            return VALUE, ConstructorValue(con, tuple(self.vals)), None
        raise InterpreterError(located(self.node, f"cannot call a non-function value {format_value(fn)}"))


class ApplyFrame(CallFrame):
    """A call made from Python (`Interpreter.apply`): the callee and arguments are already values."""

    __slots__ = ()
    memo = False

    def __init__(self, interp: Interpreter, fn: Any, args: list[Any]) -> None:
        Frame.__init__(self, interp, None, {})
        self.fn = fn
        self.vals = args
        self.i = 0
        self.phase = _ARGS

    def start(self) -> tuple[int, Any, Any]:
        if isinstance(self.fn, Op):
            self.fn = OpValue(self.fn.name)
        return self.apply()


def run_op(name: str, attrs: Any, args: list[Any], site: Call | None) -> Any:
    """Apply an operator's NumPy reference; arrays come back as arrays, tuples as tuples."""
    opdef = _opdef(name, site)
    if attrs is None or len(attrs) != len(opdef.attrs):
        attrs = opdef.make_attrs(attrs)  # fill defaults for calls built without them
    if len(args) != opdef.num_args:
        raise InterpreterError(located(site, f"{name} takes {opdef.num_args} argument(s), got {len(args)}"))
    try:
        out = opdef.reference(attrs, *args)
    except InterpreterError:
        raise
    except Exception as e:
        shapes = ", ".join(
            str(tuple(a.shape)) if isinstance(a, np.ndarray) else format_value(a) for a in args)
        raise InterpreterError(located(site, f"{name} failed on arguments {shapes}: {e}")) from e
    if type(out) is np.ndarray:
        return out
    if isinstance(out, tuple | list):
        return tuple(o if type(o) is np.ndarray else np.asarray(o) for o in out)
    return np.asarray(out)
