"""The token-stream half of the parser: cursor, errors, types, attribute values and literals.

`autorelay.ir.parser` builds expressions on top of this class; keeping types and attribute
values here keeps each file readable on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np

from autorelay.errors import ParseError
from autorelay.ir.expr import Span
from autorelay.ir.lexer import EOF, IDENT, NUMBER, PUNCT, STRING, Token
from autorelay.ir.types import (
    DTYPES,
    AnyDim,
    Dim,
    FuncType,
    GlobalTypeVar,
    IncompleteType,
    RefType,
    SymDim,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
    is_dtype,
)


class TokenCursor:
    """A position in the token list, with helpers that raise located `ParseError`s."""

    def __init__(self, tokens: list[Token], lines: list[str], source: str) -> None:
        self.toks = tokens
        self.i = 0
        self.lines = lines
        self.source = source
        # Scopes of type variables (`def @f[A]`, `type List[A]`), innermost last.
        self.type_scopes: list[dict[str, TypeVar]] = []
        # ADT names known in this program (filled before any type is parsed), and how many type
        # parameters each takes.
        self.adts: dict[str, GlobalTypeVar] = {}
        self.adt_arity: dict[str, int] = {}

    # ---- cursor ---------------------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Token:
        t = self.toks[self.i]
        if t.kind != EOF:
            self.i += 1
        return t

    def at(self, p: str) -> bool:
        return self.tok.is_punct(p)

    def at_word(self, w: str) -> bool:
        return self.tok.is_word(w)

    def accept(self, p: str) -> bool:
        if self.at(p):
            self.i += 1
            return True
        return False

    def expect(self, p: str, what: str = "") -> Token:
        if not self.at(p):
            ctx = f" {what}" if what else ""
            self.fail(f"expected '{p}'{ctx}, found {describe(self.tok)}")
        return self.next()

    def expect_word(self, w: str) -> Token:
        if not self.at_word(w):
            self.fail(f"expected '{w}', found {describe(self.tok)}")
        return self.next()

    def fail(self, message: str, tok: Token | None = None) -> NoReturn:
        raise self.error(message, tok)

    def error(self, message: str, tok: Token | None = None) -> ParseError:
        t = tok or self.tok
        src = self.lines[t.line - 1] if 0 < t.line <= len(self.lines) else ""
        return ParseError(message, t.line, t.column, src, self.source)

    def span(self, tok: Token) -> Span:
        return Span(self.source, tok.line, tok.column)

    def comma_list(self, close: str, item: Callable[[], Any], what: str = "the list") -> list[Any]:
        """Items separated by commas up to `close` (consumed); a trailing comma is allowed."""
        out: list[Any] = []
        while not self.at(close):
            out.append(item())
            if not self.accept(","):
                break
        self.expect(close, f"to close {what}")
        return out

    # ---- types ----------------------------------------------------------------------------

    def lookup_type_var(self, name: str) -> TypeVar | None:
        for scope in reversed(self.type_scopes):
            if name in scope:
                return scope[name]
        return None

    def parse_type_params(self) -> list[TypeVar]:
        """`[A, B]` (the caller has seen '['); pushes a scope that the caller pops."""
        self.expect("[")
        names = self.comma_list("]", lambda: self._ident("a type parameter name"))
        params = [TypeVar(n.text) for n in names]
        self.type_scopes.append({p.name: p for p in params})
        return params

    def _ident(self, what: str) -> Token:
        if self.tok.kind != IDENT:
            self.fail(f"expected {what}, found {describe(self.tok)}")
        return self.next()

    def parse_type(self) -> Type:
        t = self.tok
        if t.is_punct("("):
            self.next()
            fields: list[Type] = []
            trailing = False
            while not self.at(")"):
                fields.append(self.parse_type())
                trailing = self.accept(",")
                if not trailing:
                    break
            self.expect(")", "to close the tuple type")
            if len(fields) == 1 and not trailing:
                return fields[0]  # a parenthesised type
            return TupleType(tuple(fields))
        if t.kind != IDENT:
            self.fail(f"expected a type, found {describe(t)}")
        name = t.text
        if name == "fn":
            return self._func_type()
        if name == "_":
            self.next()
            return IncompleteType()
        if name == "Tensor":
            return self._tensor_type()
        if name == "Ref":
            self.next()
            self.expect("[")
            inner = self.parse_type()
            self.expect("]", "to close Ref[...]")
            return RefType(inner)
        dtype = text_dtype(name)
        if dtype is not None:
            self.next()
            return TensorType((), dtype)
        tv = self.lookup_type_var(name)
        if tv is not None:
            self.next()
            if self.at("["):  # Relay's kind checker: a type call's head must be an ADT
                self.fail(f"type variable {name} cannot take type arguments (only an ADT can)")
            return tv
        gtv = self.adts.get(name)
        if gtv is None:
            self.fail(f"unknown type {name!r}")
        self.next()
        args: list[Type] = []
        if self.accept("["):
            args = self.comma_list("]", self.parse_type)
        arity = self.adt_arity.get(name)
        if arity is not None and len(args) != arity:  # Relay's kind check: "Expected N arguments"
            self.fail(f"type {name} takes {arity} type argument(s), got {len(args)}", t)
        return TypeCall(gtv, tuple(args))

    def _func_type(self) -> FuncType:
        self.next()  # fn
        params: list[TypeVar] = []
        pushed = False
        if self.at("["):
            params = self.parse_type_params()
            pushed = True
        try:
            self.expect("(", "after 'fn' in a function type")
            args = self.comma_list(")", self.parse_type)
            self.expect("->", "in a function type")
            ret = self.parse_type()
        finally:
            if pushed:
                self.type_scopes.pop()
        return FuncType(tuple(args), ret, tuple(params))

    def _tensor_type(self) -> TensorType:
        self.next()  # Tensor
        self.expect("[", "after 'Tensor'")
        self.expect("(", "to start the tensor shape")
        dims = self.comma_list(")", self._dim)
        self.expect(",", "between the shape and the dtype")
        dt = self.tok
        dtype = text_dtype(dt.text) if dt.kind == IDENT else None
        if dtype is None:
            self.fail(f"expected a dtype ({', '.join(DTYPES)}, or a vector such as int8x4), "
                      f"found {describe(dt)}")
        self.next()
        self.expect("]", "to close Tensor[...]")
        return TensorType(tuple(dims), dtype)

    def _dim(self) -> Dim:
        t = self.tok
        if t.is_punct("?"):
            self.next()
            return AnyDim()
        if t.kind == NUMBER and isinstance(t.value, tuple) and t.value[1] in ("int32", "int64"):
            if t.value[0] < 0:
                self.fail(f"negative dimension {t.text}")
            self.next()
            return int(t.value[0])
        if t.kind == IDENT and "." not in t.text:
            self.next()
            return SymDim(t.text)
        self.fail(f"expected a dimension (an integer, '?' or a name), found {describe(t)}")

    # ---- attribute values and literals ----------------------------------------------------

    def parse_attr_value(self) -> Any:
        """ints, floats, strings, bools, None, and (nested) lists `[...]` or tuples `(...)`."""
        t = self.tok
        if t.kind == NUMBER:
            self.next()
            value, dtype = t.value  # type: ignore[misc]
            return float(value) if dtype.startswith("float") else int(value)
        if t.kind == STRING:
            self.next()
            return t.value
        if t.is_word("True") or t.is_word("False"):
            self.next()
            return t.text == "True"
        if t.is_word("None"):
            self.next()
            return None
        if t.is_punct("[") or t.is_punct("("):
            self.next()
            return tuple(self.comma_list("]" if t.text == "[" else ")", self.parse_attr_value))
        self.fail(f"expected an attribute value (number, string, bool, None or list), found {describe(t)}")

    def literal_array(self, tok: Token) -> np.ndarray:
        """The 0-d array of a NUMBER token or True/False, range-checked against its dtype."""
        if tok.kind != NUMBER:
            return np.array(tok.text == "True", dtype="bool")
        value, dtype = tok.value  # type: ignore[misc]
        if not dtype.startswith("float"):
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                self.fail(f"literal {tok.text} does not fit in {dtype}", tok)
        with np.errstate(over="ignore"):
            return np.array(value, dtype=dtype)


# Relay reads a dtype with no width as 32 bits (TVM's String2DLDataType): `int` is int32.
_DEFAULT_WIDTH = {"int": "int32", "uint": "uint32", "float": "float32"}


def text_dtype(name: str) -> str | None:
    """The dtype a name in type position denotes (`int32`, `int` = int32, `int8x4`, `intx4` =
    int32x4), or None if it is not one."""
    base, x, lanes = name.partition("x")
    dtype = _DEFAULT_WIDTH.get(base, base) + x + lanes
    return dtype if is_dtype(dtype) else None


def describe(t: Token) -> str:
    if t.kind == EOF:
        return "end of input"
    if t.kind == PUNCT:
        return f"'{t.text}'"
    return f"{t.kind} '{t.text}'"
