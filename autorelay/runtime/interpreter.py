"""The reference interpreter: the meaning of every IR program, and the oracle backends are tested against.

Design
------
The evaluator is a CEK-style machine. Instead of recursing in Python for each sub-expression, it
keeps an explicit stack of continuation frames (`autorelay.runtime.interp_frames`): evaluating a compound
node pushes a frame that waits for its children, and a finished child hands its value to the frame
on top. Recursion in the *program* (a 10,000-element `@length`, a 1,000-step RNN loop) therefore
grows a Python list, never the C stack. `let`, `if` and `match` continue in tail position (their
frame is dropped before the body or branch runs), so a let chain of any length needs no frames.

Environments are one dict per function activation, keyed by node identity. `Var`s are binding
sites (distinct objects), so a let or a pattern simply adds its variable to the dict. The same dict
memoises every evaluated compound node, which gives graph-form programs (a node used by several
parents, without a let) their meaning: one evaluation per activation, not one per path. Closures
capture only the free variables of their body.

Values: tensors are NumPy arrays, tuples are Python tuples, and closures, references and ADT
values are the classes in `autorelay.runtime.values`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.errors import InterpreterError
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
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from autorelay.ir.module import IRModule
from autorelay.ir.types import SymDim, TensorType
from autorelay.ir.visitor import free_vars
from autorelay.runtime import interp_frames as fr
from autorelay.runtime.interp_calls import ApplyFrame, CallFrame
from autorelay.runtime.interp_frames import located
from autorelay.runtime.values import (
    Closure,
    ConstructorFn,
    ConstructorValue,
    OpValue,
    format_value,
    from_list,
    input_array,
    to_list,
)

__all__ = ["Interpreter", "evaluate", "from_list", "to_list"]

_MISSING = object()

# the frame each compound node starts
_STARTERS: dict[type, type[fr.Frame]] = {
    Call: CallFrame,
    Let: fr.LetFrame,
    If: fr.IfFrame,
    Match: fr.MatchFrame,
    Tuple: fr.TupleFrame,
    TupleGetItem: fr.TupleGetItemFrame,
    RefCreate: fr.RefCreateFrame,
    RefRead: fr.RefReadFrame,
    RefWrite: fr.RefWriteFrame,
}


class Interpreter:
    """Evaluates expressions and calls global functions of one module.

    Per-function facts (free variables, parameter checks) are cached on the interpreter, so reuse
    one instance to run the same program many times (a training loop does).
    """

    def __init__(self, mod: IRModule | None = None) -> None:
        self.mod = mod if mod is not None else IRModule()
        self._globals: dict[GlobalVar, Closure] = {}
        # id(Function) -> (Function, free vars, param checks); the Function is kept so ids stay unique.
        self._fn_info: dict[int, tuple[Function, tuple[Var, ...], list[tuple[int, Var, TensorType]]]] = {}

    # ---- public entry points ------------------------------------------------------------

    def call(self, entry: str | GlobalVar, *args: Any) -> Any:
        """Call the global function `entry` (e.g. "main") on NumPy arrays / tuples / ADT values."""
        gv = GlobalVar(entry) if isinstance(entry, str) else entry
        if gv not in self.mod.functions:
            raise InterpreterError(f"no global function @{gv.name_hint} in the module")
        fn = self.mod.functions[gv]
        return self.apply(self.global_value(gv), *_coerce_args(fn, args))

    def apply(self, fn_value: Any, *args: Any) -> Any:
        """Call a function value (a closure returned by the program, a global, an op) from Python."""
        call_frame = ApplyFrame(self, fn_value, list(args))
        return self._run(call_frame)

    def eval(self, expr: Expr, env: dict[Any, Any] | None = None) -> Any:
        """The value of an expression; `env` maps free `Var`s to values."""
        return self._run(None, expr, dict(env or {}))

    # ---- helpers used by the frames -----------------------------------------------------

    def global_value(self, gv: GlobalVar) -> Closure:
        clo = self._globals.get(gv)
        if clo is None:
            try:
                fn = self.mod.functions[gv]
            except KeyError:
                raise InterpreterError(f"call of unknown global function @{gv.name_hint}") from None
            clo = self._globals[gv] = Closure(fn, {}, gv.name_hint)
        return clo

    def fn_info(self, fn: Function) -> tuple[Function, tuple[Var, ...], list[tuple[int, Var, TensorType]]]:
        info = self._fn_info.get(id(fn))
        if info is None or info[0] is not fn:
            checks = [
                (i, p, p.type_annotation)
                for i, p in enumerate(fn.params)
                if isinstance(p.type_annotation, TensorType)
            ]
            info = (fn, tuple(free_vars(fn)), checks)
            self._fn_info[id(fn)] = info
        return info

    def make_closure(self, fn: Function, env: dict[Any, Any]) -> Closure:
        _, fvs, _ = self.fn_info(fn)
        return Closure(fn, {v: env[v] for v in fvs if v in env})

    def bind_params(self, clo: Closure, args: list[Any], site: Expr | None) -> dict[Any, Any]:
        """A fresh activation environment for calling `clo` on `args`, after checking them."""
        fn = clo.fn
        _, _, checks = self.fn_info(fn)
        params = fn.params
        if len(args) != len(params):
            raise InterpreterError(located(
                site, f"{_fn_label(clo)} takes {len(params)} argument(s), got {len(args)}"))
        if checks:
            sym: dict[str, int] = {}
            for i, p, ann in checks:
                check_tensor_arg(args[i], ann, p, clo, site, sym)
        env = dict(clo.env)
        for p, a in zip(params, args):
            env[p] = a
        return env

    # ---- the machine --------------------------------------------------------------------

    def _run(self, first: fr.Frame | None, expr: Expr | None = None, env: dict | None = None) -> Any:
        """Evaluate until the stack empties. Start with a frame (already primed) or an expression."""
        stack: list[fr.Frame] = []
        if first is not None:
            code, expr, env = first.start()
            if code == fr.VALUE:
                return expr
            if code == fr.CHILD:
                stack.append(first)
        evaluate_simple = self._simple
        starters = _STARTERS
        while True:
            # -- evaluate `expr` in `env` until it yields a value or pushes a frame
            t = type(expr)
            if t is Var:
                try:
                    value = env[expr]
                except KeyError:
                    raise InterpreterError(located(expr, f"unbound variable %{expr.name_hint}")) from None
            elif t is Constant:
                value = expr.data
            else:
                value = env.get(expr, _MISSING) if t is not GlobalVar and t is not Op \
                    and t is not Constructor else _MISSING
                if value is _MISSING:
                    starter = starters.get(t)
                    if starter is None:
                        value = evaluate_simple(expr, env)
                    else:
                        frame = starter(self, expr, env)
                        code, a, b = frame.start()
                        if code == fr.CHILD:
                            stack.append(frame)
                            expr, env = a, b
                            continue
                        if code == fr.TAIL:
                            expr, env = a, b
                            continue
                        value = a
                        if frame.memo:
                            env[expr] = value
            # -- hand the value to the frames waiting for it
            while True:
                if not stack:
                    return value
                frame = stack[-1]
                code, a, b = frame.resume(value)
                if code == fr.VALUE:
                    stack.pop()
                    value = a
                    if frame.memo:
                        frame.env[frame.node] = value
                    continue
                if code == fr.TAIL:
                    stack.pop()
                expr, env = a, b
                break

    def _simple(self, expr: Expr, env: dict[Any, Any]) -> Any:
        """Values of leaf nodes that need no frame: globals, ops, constructors, functions."""
        if isinstance(expr, GlobalVar):
            return self.global_value(expr)
        if isinstance(expr, Function):
            value = self.make_closure(expr, env)
            env[expr] = value
            return value
        if isinstance(expr, Constructor):
            return ConstructorValue(expr, ()) if not expr.inputs else ConstructorFn(expr)
        if isinstance(expr, Op):
            return OpValue(expr.name)
        raise InterpreterError(f"cannot evaluate {type(expr).__name__}")


def _fn_label(clo: Closure) -> str:
    return f"@{clo.name}" if clo.name else "function"


def check_tensor_arg(arg: Any, ann: TensorType, param: Var, clo: Closure, site: Expr | None,
                     sym: dict[str, int]) -> None:
    """Raise if `arg` is not a tensor of the annotated dtype and shape.

    Static dims must match exactly; a named dim (`n`) must have one extent across the call's
    arguments (`sym` collects them); `?` matches anything.
    """
    where = f"argument %{param.name_hint} of {_fn_label(clo)}"
    if not isinstance(arg, np.ndarray):
        raise InterpreterError(located(site, f"{where} expects a tensor {type_text(ann)}, "
                                             f"got {format_value(arg)}"))
    if str(arg.dtype) != ann.dtype:
        raise InterpreterError(located(
            site, f"{where}: dtype mismatch, expected {ann.dtype}, got {arg.dtype}"))
    shape = ann.shape
    if len(shape) != arg.ndim or any(isinstance(d, int) and d != s for d, s in zip(shape, arg.shape)):
        msg = f"{where}: shape mismatch, annotation {type_text(ann)} but value has shape {tuple(arg.shape)}"
        raise InterpreterError(located(site, msg))
    for d, s in zip(shape, arg.shape):
        if isinstance(d, SymDim) and sym.setdefault(d.name, s) != s:
            raise InterpreterError(located(site, f"{where}: dimension {d.name} is {s} here but "
                                                 f"{sym[d.name]} in an earlier argument"))


def type_text(t: TensorType) -> str:
    """`Tensor[(1, 3), float32]` without depending on the printer."""
    dims = ", ".join(str(d) for d in t.shape) + ("," if len(t.shape) == 1 else "")
    return f"Tensor[({dims}), {t.dtype}]"


def _coerce_args(fn: Function, args: tuple[Any, ...]) -> list[Any]:
    """Inputs for tensor parameters converted as the compiled executors convert them (`input_array`:
    a Python scalar or list, a float64 array for a float32 input); what that rule refuses is left
    for the call's own check to name."""
    out = []
    for i, a in enumerate(args):
        ann = fn.params[i].type_annotation if i < len(fn.params) else None
        if isinstance(ann, TensorType) and isinstance(a, np.ndarray | int | float | bool | list | np.generic):
            arr, problem = input_array(a, ann.dtype)
            a = arr if problem is None else a
        elif isinstance(a, int | float | bool | list | np.generic):
            a = np.asarray(a)
        out.append(a)
    return out


def evaluate(mod_or_expr: IRModule | Expr, *args: Any, entry: str = "main") -> Any:
    """Run a program: a module's `entry` function, a Function applied to `args`, or an expression."""
    if isinstance(mod_or_expr, IRModule):
        return Interpreter(mod_or_expr).call(entry, *args)
    interp = Interpreter()
    if isinstance(mod_or_expr, Function):
        clo = interp.make_closure(mod_or_expr, {})
        return interp.apply(clo, *_coerce_args(mod_or_expr, args))
    if args:
        raise InterpreterError("arguments given, but the expression to evaluate is not a function")
    return interp.eval(mod_or_expr)

