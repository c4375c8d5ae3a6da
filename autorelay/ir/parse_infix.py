"""Infix operators of the Relay text format: `%a + %b * 2f < %c` and friends.

Relay's table (src/relay/parser/op_table.h): `*` and `/` bind tightest (12), then `+` and `-`
(10), then `<`, `<=`, `>`, `>=` (8), then `==` and `!=` (7); every level is left-associative, so
`1 - 2 - 3` is `(1 - 2) - 3` and `1 == 1 < 2` is `1 == (1 < 2)`. Each operator is sugar for a call
of the named op with default attributes, so `%a + %b` *is* `add(%a, %b)`: the printer writes the
call and the round trip is exact.

`%` (remainder) is an extension (Relay's text format has none, since `%` starts a variable): it is
`mod`, at the level of `*`. `/` is Relay's `divide`, which truncates integers toward zero, and
`mod` is its remainder (sign of the dividend, C's `%`), so `(a / b) * b + a % b == a` holds as in
C; `floor_mod` (Python's `%`) stays a call. Write `%` with a space after it (`%a % %b`), since
`%b` right after it would be a variable.

Unary minus exists only on numeric literals (`-1f`, Relay's `--10`), which the lexer reads as one
token; `-%x` is an error: write `negative(%x)`.

The loop is an operator-precedence (shunting-yard) parse, so a long chain `1 + 1 + … + 1` does
not recurse.
"""

from __future__ import annotations

from collections.abc import Callable

from autorelay.ir.expr import Expr
from autorelay.ir.lexer import PUNCT, Token
from autorelay.ir.parse_types import TokenCursor

BINARY_OPS: dict[str, tuple[str, int]] = {
    "*": ("multiply", 12), "/": ("divide", 12), "%": ("mod", 12),
    "+": ("add", 10), "-": ("subtract", 10),
    "<": ("less", 8), "<=": ("less_equal", 8), ">": ("greater", 8), ">=": ("greater_equal", 8),
    "==": ("equal", 7), "!=": ("not_equal", 7),
}

BuildCall = Callable[[str, Expr, Expr, Token], Expr]


def parse_infix(cursor: TokenCursor, operand: Callable[[], Expr], build: BuildCall) -> Expr:
    """Operands separated by binary operators, combined by precedence (all left-associative).

    `operand()` parses one operand (a call or projection chain); `build(op_name, lhs, rhs, tok)`
    makes the call, `tok` being the operator token (for its location).
    """
    exprs = [operand()]
    pending: list[tuple[str, int, Token]] = []

    def reduce() -> None:
        name, _, tok = pending.pop()
        rhs = exprs.pop()
        exprs.append(build(name, exprs.pop(), rhs, tok))

    while True:
        t = cursor.tok
        entry = BINARY_OPS.get(t.text) if t.kind == PUNCT else None
        if entry is None:
            break
        cursor.next()
        name, prec = entry
        while pending and pending[-1][1] >= prec:
            reduce()
        pending.append((name, prec, t))
        exprs.append(operand())
    while pending:
        reduce()
    return exprs[0]
