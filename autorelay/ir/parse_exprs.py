"""The expression half of the Relay text parser: blocks, statements, calls, control flow.

`ExprParser` resolves every name while it parses (locals in `scopes`, constructors, and operators
through the `OpResolver` it is given), so errors point at the name itself. Infix operators are in
`parse_infix`, `match` and patterns in `parse_patterns`; `autorelay.ir.parser.Parser` adds the
top level.
"""

from __future__ import annotations

import numpy as np

from autorelay.errors import AutoRelayError
from autorelay.ir.expr import (
    Call,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from autorelay.ir.lexer import GLOBAL, IDENT, LOCAL, NUMBER, Token
from autorelay.ir.op_resolver import OpResolver
from autorelay.ir.parse_infix import parse_infix
from autorelay.ir.parse_patterns import PatternParser
from autorelay.ir.parse_types import describe
from autorelay.ir.visitor import children, post_order

_KEYWORDS = {"fn", "let", "if", "else", "match", "def", "type", "ref", "ref_read", "ref_write", "meta",
             "free_var", "extern"}


class ExprParser(PatternParser):
    def __init__(self, tokens: list[Token], lines: list[str], source: str, ops: OpResolver) -> None:
        super().__init__(tokens, lines, source)
        self.ops = ops
        self.scopes: list[dict[str, Expr]] = []  # `%name` -> Var or graph-bound expression
        self.constructors: dict[str, Constructor] = {}
        self.global_refs: list[tuple[str, Token]] = []  # checked once all defs are known
        self.constants: list[np.ndarray] | None = None
        self.const_nodes: dict[int, Constant] = {}
        self.free_scope: dict[str, Expr] = {}  # free variables, declared or supplied by the caller
        self.declared_free: set[str] = set()

    # ---- functions and blocks -----------------------------------------------------------------

    def function_rest(self, start: Token) -> Function:
        """`[A](%x: T, Attr=1) -> R { body }` after `fn` or `def @name`."""
        tparams = self.parse_type_params() if self.at("[") else []
        if not tparams:
            self.type_scopes.append({})
        try:
            self.expect("(", "to start the parameter list")
            params: list[Var] = []
            attrs: dict[str, object] = {}
            while not self.at(")"):
                t = self.tok
                if t.kind == IDENT and self.peek().is_punct("="):
                    self.next()
                    self.next()
                    attrs[t.text] = self.parse_attr_value()
                elif t.kind == LOCAL:
                    if any("%" + p.name_hint == t.text for p in params):
                        self.fail(f"parameter {t.text} is declared twice", t)
                    params.append(self.binder())
                else:
                    self.fail("expected a parameter like %x or an attribute like Primitive=1, "
                              f"found {describe(t)}")
                if not self.accept(","):
                    break
            self.expect(")", "to close the parameter list")
            ret = None
            if self.accept("->"):
                ret = self.parse_type()
            self.scopes.append({("%" + p.name_hint): p for p in params})
            body = self.block()
            self.scopes.pop()
        finally:
            self.type_scopes.pop()
        return Function(tuple(params), body, ret, tuple(tparams), attrs).with_span(self.span(start))

    def binder(self) -> Var:
        """`%x` or `%x: T` at a binding site (not yet put in scope)."""
        t = self.next()
        self.check_bindable(t)
        ann = self.parse_type() if self.accept(":") else None
        return Var(t.text[1:], ann).with_span(self.span(t))

    def block(self) -> Expr:
        self.expect("{", "to start a block")
        body = self.body()
        self.expect("}", "to close the block")
        return body

    def body(self) -> Expr:
        """Statements then the result expression, in a new scope. A statement is `let %x = e;`,
        `%0 = e;` (a graph binding), `free_var %x: T;` (a free variable, as Relay prints them) or
        `e;` (sequencing: Relay's `let %_ = e;`)."""
        scope: dict[str, Expr] = {}
        self.scopes.append(scope)
        lets: list[tuple[Var, Expr, Token]] = []
        while True:
            t = self.tok
            if t.is_word("let"):
                self.next()
                if self.tok.kind != LOCAL:
                    self.fail(f"expected a variable after 'let', found {describe(self.tok)}")
                var = self.binder()
                scope["%" + var.name_hint] = var  # in scope in its own value: recursive closures
                self.expect("=", "in a let binding")
                value = self.expr()
                if var.type_annotation is None and not isinstance(value, Function) and _reads(value, var):
                    self.fail(f"%{var.name_hint} is read in its own let value: a let variable is in scope "
                              "there only so that a function can call itself; name the new binding "
                              "differently", t)
                self.expect(";", "after the let binding's value")
                lets.append((var, value, t))
            elif t.kind == LOCAL and self.peek().is_punct("="):
                self.check_bindable(t)
                self.next()
                self.next()
                scope[t.text] = self.expr()
                self.expect(";", f"after the value of {t.text}")
            elif t.is_word("free_var"):
                self.free_var()
            else:
                e = self.expr()
                if not self.accept(";"):
                    result = e
                    break
                lets.append((Var("_").with_span(self.span(t)), e, t))
        self.scopes.pop()
        for var, value, tok in reversed(lets):
            result = Let(var, value, result).with_span(self.span(tok))
        return result

    def free_var(self) -> None:
        """`free_var %x: T;` declares a free variable of the program (visible from here on, in
        every block); one that `parse_expr(free_vars=…)` supplied under that name is used as is."""
        self.next()
        t = self.tok
        if t.kind != LOCAL:
            self.fail(f"expected a variable after 'free_var', found {describe(t)}")
        var = self.binder()
        self.expect(";", "after the free_var declaration")
        if t.text in self.declared_free:
            self.fail(f"free variable {t.text} is declared twice", t)
        self.declared_free.add(t.text)
        supplied = self.free_scope.get(t.text)
        if supplied is None:
            self.free_scope[t.text] = var
        elif isinstance(supplied, Var) and var.type_annotation not in (None, supplied.type_annotation):
            self.fail(f"free_var {t.text} is declared with another type than the variable supplied "
                      "under that name", t)

    # ---- expressions --------------------------------------------------------------------------

    def expr(self) -> Expr:
        """Operands joined by infix operators (`%a + %b * 2f`); see `parse_infix`."""
        return parse_infix(self, self.postfix, self.binary_call)

    def binary_call(self, name: str, lhs: Expr, rhs: Expr, tok: Token) -> Expr:
        if self.ops(name) is None:
            self.fail(f"'{tok.text}' stands for the operator {name}, which is not known here", tok)
        return self.op_call(name, [lhs, rhs], {}, {}, tok).with_span(self.span(tok))

    def postfix(self) -> Expr:
        """An operand: a primary expression followed by calls `(…)` and projections `.0`."""
        start = self.tok
        e = self.primary()
        while True:
            if self.at("("):
                e = self.call(e, start)
            elif self.at(".") and self.peek().kind == NUMBER:
                self.next()
                idx = self.next()
                e = TupleGetItem(e, int(idx.value[0])).with_span(self.span(idx))  # type: ignore[index]
            else:
                return e

    def check_bindable(self, t: Token) -> None:
        """`%0.1` cannot name a binding: every use of it reads as projection 1 of `%0`."""
        segments = t.text[1:].split(".")
        if len(segments) > 1 and segments[0].isdigit():
            self.fail(f"cannot bind {t.text}: a name starting with digits then '.' would read as "
                      f"projection {'.'.join(segments[1:])} of %{segments[0]}", t)

    def local_ref(self, t: Token) -> Expr:
        """A use of a dotted local token: the longest bound name that is a prefix of it at a `.`,
        followed by all-digit segments that are tuple projections. So `%input.1` is the variable
        `input.1` when one is in scope, else projection 1 of `%input`; `%0.1` is always projection
        1 of graph binding `%0`; `%conv1.weight` must be bound. (The printer writes `(%x).1` where
        `%x.1` would be captured by a variable named `x.1`.)"""
        segments = t.text[1:].split(".")
        for k in range(len(segments), 0, -1):
            rest = segments[k:]
            if not all(s.isdigit() for s in rest):
                break  # a projection index is digits only: no shorter prefix can work either
            if k > 1 and segments[0].isdigit():
                continue  # graph bindings are plain integers
            name = "%" + ".".join(segments[:k])
            for scope in (*reversed(self.scopes), self.free_scope):
                if name in scope:
                    e = scope[name]
                    for s in rest:
                        e = TupleGetItem(e, int(s)).with_span(self.span(t))
                    return e
        self.fail(f"unknown variable {t.text}", t)

    def primary(self) -> Expr:
        t = self.tok
        if t.kind == LOCAL:
            self.next()
            return self.local_ref(t)
        if t.kind == GLOBAL:
            self.next()
            self.global_refs.append((t.text[1:], t))
            return GlobalVar(t.text[1:])
        if t.kind == NUMBER or t.is_word("True") or t.is_word("False"):
            self.next()
            return Constant(self.literal_array(t)).with_span(self.span(t))
        if t.is_punct("("):
            return self.paren()
        if t.is_punct("-"):
            self.fail("unary minus applies only to number literals (-1f); write negative(...)")
        if t.kind != IDENT:
            self.fail(f"expected an expression, found {describe(t)}")
        if t.text in _KEYWORDS:
            return self.keyword_expr(t)
        self.next()
        if t.text in self.constructors:
            return self.constructors[t.text]
        if self.ops(t.text) is not None:
            return Op(t.text).with_span(self.span(t))
        kind = "constructor" if t.text[:1].isupper() else "operator"
        self.fail(f"unknown {kind} {t.text}{self.sigil_hint(t.text)}", t)

    def sigil_hint(self, name: str) -> str:
        """Why a bare name may have been meant as a variable: `%x` is in scope, or no call follows."""
        if any(f"%{name}" in scope for scope in (*self.scopes, self.free_scope)):
            return f" (did you mean the variable %{name}?)"
        if not self.at("("):
            return f" (a local variable is written %{name}, a global @{name})"
        return ""

    def keyword_expr(self, t: Token) -> Expr:
        w = t.text
        if w == "fn":
            self.next()
            return self.function_rest(t)
        if w == "if":
            return self.if_()
        if w == "match":
            return self.match()
        if w in ("ref", "ref_read", "ref_write"):
            self.next()
            self.expect("(", f"after {w}")
            args = self.comma_list(")", self.body)
            n = 2 if w == "ref_write" else 1
            if len(args) != n:
                self.fail(f"{w} takes {n} argument(s), got {len(args)}", t)
            if w == "ref_write":
                return RefWrite(*args).with_span(self.span(t))
            node = RefCreate(args[0]) if w == "ref" else RefRead(args[0])
            return node.with_span(self.span(t))
        if w == "meta":
            return self.meta(t)
        self.fail(f"'{w}' cannot start an expression here")

    def paren(self) -> Expr:
        open_tok = self.next()
        if self.accept(")"):
            return Tuple(()).with_span(self.span(open_tok))
        first = self.body()  # `(let %x = 1; %x)` and `(e1; e2)` too, as in Relay
        if self.accept(","):
            rest = self.comma_list(")", self.body, "the tuple")
            return Tuple((first, *rest)).with_span(self.span(open_tok))
        self.expect(")", "to close the parenthesis")
        return first

    def call(self, callee: Expr, start: Token) -> Expr:
        self.expect("(")
        args: list[Expr] = []
        kwargs: dict[str, object] = {}
        kw_toks: dict[str, Token] = {}
        while not self.at(")"):
            t = self.tok
            if t.kind == IDENT and self.peek().is_punct("="):
                self.next()
                self.next()
                if t.text in kwargs:
                    self.fail(f"attribute {t.text} given twice", t)
                kwargs[t.text] = self.parse_attr_value()
                kw_toks[t.text] = t
            else:
                if kwargs:
                    self.fail("positional argument after keyword attributes")
                args.append(self.body())
            if not self.accept(","):
                break
        self.expect(")", "to close the argument list")
        span = self.span(start)
        if isinstance(callee, Op):
            return self.op_call(callee.name, args, kwargs, kw_toks, start).with_span(span)
        if kwargs:
            self.fail("keyword attributes are only allowed in operator calls", next(iter(kw_toks.values())))
        if isinstance(callee, Constructor) and len(args) != len(callee.inputs):
            n = len(callee.inputs)
            self.fail(f"constructor {callee.name} takes {n} argument(s), got {len(args)}", start)
        return Call(callee, tuple(args)).with_span(span)

    def op_call(self, name: str, args: list[Expr], kwargs: dict[str, object],
                kw_toks: dict[str, Token], start: Token) -> Call:
        opdef = self.ops(name)
        if opdef is None:
            self.fail(f"unknown operator {name}", start)
        if len(args) != len(opdef.arg_names):
            self.fail(f"{name} takes {len(opdef.arg_names)} argument(s) ({', '.join(opdef.arg_names)}), "
                      f"got {len(args)}", start)
        for k, tok in kw_toks.items():
            if k not in opdef.attrs:
                known = ", ".join(opdef.attrs) or "none"
                self.fail(f"{name} has no attribute {k!r} (known: {known})", tok)
        try:
            attrs = opdef.make_attrs(kwargs)
        except (AutoRelayError, ValueError, TypeError) as e:
            said = str(getattr(e, "message", e)).removeprefix(f"{name}: ")  # the op's errors name it too
            self.fail(f"bad attributes for {name}: {said}", start)
        return Call(Op(name), tuple(args), attrs)

    def if_(self) -> Expr:
        t = self.next()
        self.expect("(", "after 'if'")
        cond = self.body()
        self.expect(")", "to close the if condition")
        then = self.block()
        self.expect_word("else")
        other = self.if_() if self.at_word("if") else self.block()
        return If(cond, then, other).with_span(self.span(t))

    def meta(self, t: Token) -> Expr:
        self.next()
        self.expect("[")
        kind = self.tok
        if not kind.is_word("relay.Constant"):
            self.fail(f"only meta[relay.Constant][i] is supported, found {describe(kind)}")
        self.next()
        self.expect("]")
        self.expect("[")
        idx_tok = self.tok
        if idx_tok.kind != NUMBER or idx_tok.value[1] != "int32" or idx_tok.value[0] < 0:  # type: ignore[index]
            self.fail(f"expected a constant index, found {describe(idx_tok)}")
        self.next()
        self.expect("]")
        i = int(idx_tok.value[0])  # type: ignore[index]
        have = 0 if self.constants is None else len(self.constants)
        if i >= have:
            self.fail(f"meta[relay.Constant][{i}] refers to constant {i}, but {have} constant(s) were "
                      "supplied (pass constants= or include a #[metadata] section)", idx_tok)
        if i not in self.const_nodes:
            assert self.constants is not None
            self.const_nodes[i] = Constant(self.constants[i]).with_span(self.span(t))
        return self.const_nodes[i]


def _reads(value: Expr, var: Var) -> bool:
    """Whether `value` reads `var` outside the functions inside it (a closure may name itself)."""
    return any(n is var for n in post_order(value, lambda e: [] if isinstance(e, Function) else children(e)))
