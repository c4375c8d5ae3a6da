"""The `match` half of the expression parser: `match (e) { Pattern => e, … }` and patterns.

`PatternParser` is a base of `autorelay.ir.parse_exprs.ExprParser` and uses its scopes,
constructors and sub-parsers (declared below, defined there).
"""

from __future__ import annotations

from autorelay.ir.expr import (
    Clause,
    Constructor,
    Expr,
    Match,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    Var,
)
from autorelay.ir.lexer import IDENT, LOCAL
from autorelay.ir.parse_types import TokenCursor, describe


class PatternParser(TokenCursor):
    scopes: list[dict[str, Expr]]
    constructors: dict[str, Constructor]

    # Defined by ExprParser.
    def binder(self) -> Var:
        raise NotImplementedError

    def paren(self) -> Expr:
        raise NotImplementedError

    def block(self) -> Expr:
        raise NotImplementedError

    def body(self) -> Expr:
        raise NotImplementedError

    def match(self) -> Expr:
        t = self.next()
        complete = not self.accept("?")
        if not self.at("("):
            self.fail(f"expected '(' after 'match', found {describe(self.tok)}")
        data = self.paren()  # `match (%xs, %ys)` matches a tuple, as in Relay's prelude
        self.expect("{", "to start the match clauses")

        def clause() -> Clause:
            self.scopes.append({})
            lhs = self.pattern()
            self.expect("=>", "after the pattern")
            rhs = self.block() if self.at("{") else self.body()
            self.scopes.pop()
            return Clause(lhs, rhs)

        clauses = self.comma_list("}", clause)
        return Match(data, tuple(clauses), complete).with_span(self.span(t))

    def pattern(self) -> Pattern:
        t = self.tok
        if t.is_word("_"):
            self.next()
            return PatternWildcard().with_span(self.span(t))
        if t.kind == LOCAL:
            if t.text in self.scopes[-1]:
                self.fail(f"variable {t.text} is bound twice in this pattern", t)
            var = self.binder()
            self.scopes[-1][t.text] = var
            return PatternVar(var).with_span(self.span(t))
        if t.is_punct("("):
            self.next()
            return PatternTuple(tuple(self.comma_list(")", self.pattern))).with_span(self.span(t))
        if t.kind == IDENT:
            ctor = self.constructors.get(t.text)
            if ctor is None:
                self.fail(f"unknown constructor {t.text}", t)
            self.next()
            subs = self.comma_list(")", self.pattern) if self.accept("(") else []
            if len(subs) != len(ctor.inputs):
                self.fail(f"constructor {ctor.name} takes {len(ctor.inputs)} argument(s), "
                          f"its pattern has {len(subs)}", t)
            return PatternConstructor(ctor, tuple(subs)).with_span(self.span(t))
        self.fail(f"expected a pattern (_, %x, a constructor or a tuple), found {describe(t)}")
