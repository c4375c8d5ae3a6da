"""Tokens of the Relay text format (version 0.0.5).

The lexer is a single hand-written pass: it keeps every token's line and column so the parser can
point a caret at the offending character, skips `//` and `/* … */` comments (block comments nest,
as in Relay: `/* a /* b */ c */` is one comment; printed type comments `/* ty=… */` never reach
the parser) and stops at a `#[metadata]` line, handing the rest of the text over as the metadata
section.

A local token takes dotted segments with it: `%input.1`, `%conv1.weight` and `%t.0` are each one
LOCAL token. PyTorch-imported models name variables `%input.1`, so whether a trailing all-digit
segment is part of the name or a tuple projection depends on what is in scope; the parser decides
(`ExprParser.local_ref`: the longest bound prefix wins, the digit segments after it project).
(TVM's own tokenizer stops a name at the first `.`, so it reads `%input.1` as a projection and
cannot parse `%conv1.weight`; this format accepts both.)

Numbers carry their Relay suffix: `1f` and `2.5f16` are floats, `-3i64` an int64, `42i` and `1`
int32s, and `1.5` a float32. An unsuffixed integer that does not fit int32 is an int64
(`2147483648`), as in Relay; a literal that does not fit its suffix's dtype (`32768i16`,
`65505f16`) is an error at the literal. (`1e999f` is infinity, which the printer writes for an
infinite attribute.)

The infix operators `+ - * / % == != < <= > >=` are PUNCT tokens (the parser gives them Relay's
precedence). `-` directly followed by a digit is part of a negative literal where an operand is
expected (at the start, after `(`, `,`, `=`, an operator …), and Relay's `--10` is `10`; after an
operand (`%x -1`, `f(1)-2`) it is the subtraction operator. A `%` not followed by a name is the
remainder operator, so write `%a % %b` with a space after it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from autorelay.errors import ParseError

# Token kinds.
IDENT = "ident"  # name, keyword or dotted op name (`nn.conv2d`)
LOCAL = "local"  # %x, %0, or dotted: %conv1.weight, %t.0 (see the module docstring)
GLOBAL = "global"  # @main
NUMBER = "number"
STRING = "string"
PUNCT = "punct"
EOF = "eof"

_SUFFIX_DTYPES = {
    "f": "float32", "f16": "float16", "f32": "float32", "f64": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "i": "int32",
}

_NUMBER = re.compile(r"-*\d+(\.\d+)?([eE][+-]?\d+)?(f16|f32|f64|f|i8|i16|i32|i64|i|u8|u16|u32|u64)?",
                     re.ASCII)
_INT_ONLY = re.compile(r"\d+", re.ASCII)
_DIGITS = frozenset("0123456789")  # str.isdigit/isalpha accept non-ASCII ('➑', 'Ï') the patterns do not
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_LOCAL = re.compile(r"%[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")  # `%x`, `%0`, `%input.1`, `%t.0.1`
_GLOBAL = re.compile(r"@[A-Za-z_][A-Za-z0-9_]*")
_PUNCTS = ("=>", "->", "==", "!=", "<=", ">=", "#[", "(", ")", "[", "]", "{", "}", ",", ";", ":", "=", ".",
           "?", "+", "-", "*", "/", "%", "<", ">")
_KEYWORDS = frozenset({"fn", "let", "if", "else", "match", "def", "type", "extern", "free_var", "ref",
                       "ref_read", "ref_write", "meta"})
# The largest finite value of each float dtype, as its shortest text reads (float32's max prints as
# `3.4028235e+38f`, a hair above the exact 3.4028234664e38); beyond it a literal is an error.
_FLOAT_MAX = {"float16": 65504.0, "float32": 3.4028235e38, "float64": float("inf")}
_INT_RANGE = {f"{u}int{b}": ((0, 2**b - 1) if u else (-(2 ** (b - 1)), 2 ** (b - 1) - 1))
              for u in ("", "u") for b in (8, 16, 32, 64)}
METADATA_MARK = "#[metadata]"


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str
    line: int
    column: int
    value: object = None  # for NUMBER: (python value, dtype); for STRING: the unescaped text

    def is_punct(self, p: str) -> bool:
        return self.kind == PUNCT and self.text == p

    def is_word(self, w: str) -> bool:
        return self.kind == IDENT and self.text == w


@dataclass
class Lexed:
    tokens: list[Token]
    metadata: str | None  # text after `#[metadata]`, if present
    metadata_line: int


class Lexer:
    def __init__(self, text: str, source: str = "<string>") -> None:
        self.text = text
        self.source = source
        self.lines = text.split("\n")
        self.pos = 0
        self.line = 1
        self.col = 1

    def error(self, message: str, line: int, column: int) -> ParseError:
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return ParseError(message, line, column, src, self.source)

    def _advance(self, n: int) -> None:
        chunk = self.text[self.pos:self.pos + n]
        nl = chunk.count("\n")
        if nl:
            self.line += nl
            self.col = n - chunk.rfind("\n")
        else:
            self.col += n
        self.pos += n

    def tokenize(self) -> Lexed:
        text = self.text
        toks: list[Token] = []
        n = len(text)
        while True:
            self._skip_space_and_comments()
            if self.pos >= n:
                toks.append(Token(EOF, "", self.line, self.col))
                return Lexed(toks, None, 0)
            if text.startswith(METADATA_MARK, self.pos):
                line = self.line
                toks.append(Token(EOF, "", self.line, self.col))
                return Lexed(toks, text[self.pos + len(METADATA_MARK):], line)
            toks.append(self._token(toks[-1] if toks else None))

    def _skip_space_and_comments(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c in " \t\r\n":
                self._advance(1)
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self._advance((n if end < 0 else end) - self.pos)
            elif text.startswith("/*", self.pos):
                self._advance(self._block_comment_end() - self.pos)
            else:
                return

    def _block_comment_end(self) -> int:
        """The index just past the `*/` closing the comment at `pos`; comments nest."""
        text, depth, i = self.text, 0, self.pos
        while i < len(text):
            if text.startswith("/*", i):
                depth, i = depth + 1, i + 2
            elif text.startswith("*/", i):
                depth, i = depth - 1, i + 2
                if depth == 0:
                    return i
            else:
                i += 1
        raise self.error("unterminated comment: '/*' has no matching '*/'", self.line, self.col)

    def _token(self, prev: Token | None) -> Token:
        text, pos, line, col = self.text, self.pos, self.line, self.col
        c = text[pos]
        if c == "%":
            m = _LOCAL.match(text, pos)
            if not m:
                return self._emit(PUNCT, "%")  # the remainder operator
            return self._emit(LOCAL, m.group())
        if c == "@":
            m = _GLOBAL.match(text, pos)
            if not m:
                raise self.error("expected a global name after '@'", line, col)
            return self._emit(GLOBAL, m.group())
        if c == '"':
            return self._string()
        if c in _DIGITS or (c == "-" and _NEGATIVE.match(text, pos) and not _ends_operand(prev)):
            if prev is not None and prev.is_punct(".") and c in _DIGITS:  # `%t.0.1`: index 0, not `0.1`
                m = _INT_ONLY.match(text, pos)
                assert m is not None
                return self._emit(NUMBER, m.group(), (int(m.group()), "int32"))
            return self._number()
        if (c.isascii() and c.isalpha()) or c == "_":
            m = _IDENT.match(text, pos)
            assert m is not None
            return self._emit(IDENT, m.group())
        for p in _PUNCTS:
            if text.startswith(p, pos):
                return self._emit(PUNCT, p)
        raise self.error(f"unexpected character {c!r}", line, col)

    def _emit(self, kind: str, text: str, value: object = None) -> Token:
        tok = Token(kind, text, self.line, self.col, value)
        self._advance(len(text))
        return tok

    def _number(self) -> Token:
        m = _NUMBER.match(self.text, self.pos)
        assert m is not None
        lit = m.group()
        end = m.end()
        if end < len(self.text) and (self.text[end].isalnum() or self.text[end] == "_"):
            bad = re.match(r"[A-Za-z0-9_.]+", self.text[self.pos:])
            word = bad.group() if bad else lit
            raise self.error(f"malformed number {word!r}", self.line, self.col)
        suffix = m.group(3)
        body = lit[: len(lit) - len(suffix)] if suffix else lit
        digits = body.lstrip("-")
        negative = (len(body) - len(digits)) % 2 == 1  # Relay: `--10` is 10
        is_float_text = m.group(1) is not None or m.group(2) is not None
        if suffix:
            dtype = _SUFFIX_DTYPES[suffix]
        else:
            dtype = "float32" if is_float_text else "int32"
        if dtype.startswith("float"):
            value: object = -float(digits) if negative else float(digits)
            if math.isfinite(value) and abs(value) > _FLOAT_MAX[dtype]:  # type: ignore[arg-type]
                raise self.error(f"float literal {lit!r} does not fit in {dtype} "
                                 f"(largest finite value {_FLOAT_MAX[dtype]:g})", self.line, self.col)
        else:
            if is_float_text:
                msg = f"integer literal {lit!r} has a fractional part or exponent"
                raise self.error(msg, self.line, self.col)
            value = -int(digits) if negative else int(digits)
            lo, hi = _INT_RANGE[dtype]
            if not suffix and not lo <= value <= hi:  # type: ignore[operator]
                dtype, (lo, hi) = "int64", _INT_RANGE["int64"]  # Relay: too big for int32 is int64
            if not lo <= value <= hi:  # type: ignore[operator]
                raise self.error(f"integer literal {lit!r} does not fit in {dtype} ({lo} to {hi})",
                                 self.line, self.col)
        return self._emit(NUMBER, lit, (value, dtype))

    def _string(self) -> Token:
        text, i = self.text, self.pos + 1
        out: list[str] = []
        escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "r": "\r"}
        while i < len(text):
            c = text[i]
            if c == '"':
                return self._emit(STRING, text[self.pos:i + 1], "".join(out))
            if c == "\n":
                break
            if c == "\\" and i + 1 < len(text):
                out.append(escapes.get(text[i + 1], text[i + 1]))
                i += 2
                continue
            out.append(c)
            i += 1
        raise self.error("unterminated string literal", self.line, self.col)


_NEGATIVE = re.compile(r"-+\d", re.ASCII)


def _ends_operand(prev: Token | None) -> bool:
    """Whether `prev` can end an operand, so that a `-` after it is the subtraction operator."""
    if prev is None:
        return False
    if prev.kind in (LOCAL, GLOBAL, NUMBER, STRING):
        return True
    if prev.kind == IDENT:
        return prev.text not in _KEYWORDS
    return prev.kind == PUNCT and prev.text in (")", "}")  # not `]`: it ends the version header


def tokenize(text: str, source: str = "<string>") -> Lexed:
    return Lexer(text, source).tokenize()
