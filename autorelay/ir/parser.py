"""Parser of the Relay text format, version 0.0.5: `parse(text, ops=…) -> IRModule`, `parse_expr`.

A hand-written recursive-descent parser. Notes on the choices that matter:

* Graph bindings `%0 = e;` name an expression without creating a node, so every later `%0` is the
  *same* object: DAG sharing in the text is sharing in the IR. `let %x = e;` creates a `Let`.
* Names are resolved while parsing (scopes of locals, type variables, ADTs, constructors, ops), so
  an unknown variable, constructor or operator is reported at its own line and column.
* Type definitions are parsed before functions (the top level is pre-scanned), so a function may
  use an ADT defined further down, and ADTs may refer to one another, even mutually, as Relay's
  parser allows. What Relay's kind checker rejects in such a group is rejected here, located at
  the reference: an ADT applied to the wrong number of type arguments (`Forest` where it was
  declared `Forest[A]`); an unknown type name is an error too.
* `extern type Name[A];` declares an ADT without constructors (Relay's `extern type`; the `;`
  is optional). It prints back as an empty `type Name[A] {}`, which Relay reads the same.
* Operators come from the `ops` resolver the caller passes (`autorelay.ir.op_resolver`): the IR
  does not import the op library. `autorelay.parse` / `autorelay.parse_expr`
  (`autorelay.text_format`) pass the op registry's. Op calls are built like `registry.call`:
  attribute names are validated and defaults filled by the op's `make_attrs`, and a bad attribute
  is a `ParseError` pointing at it.
* Entry points run under `autorelay.utils.deep.deep`, so nesting depth is not limited by Python's
  recursion limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from autorelay.ir.expr import Constructor, Expr, Function, GlobalVar, Var
from autorelay.ir.lexer import GLOBAL, IDENT, STRING, Token, tokenize
from autorelay.ir.metadata import decode_metadata
from autorelay.ir.module import IRModule
from autorelay.ir.op_resolver import OpResolver
from autorelay.ir.parse_exprs import ExprParser
from autorelay.ir.parse_types import describe
from autorelay.ir.types import GlobalTypeVar, TypeData
from autorelay.utils.deep import deep

SUPPORTED_VERSIONS = ("0.0.5", "0.0.4")


class Parser(ExprParser):
    def __init__(self, text: str, source: str, constants: Sequence[np.ndarray] | None,
                 prelude: IRModule | None, ops: OpResolver) -> None:
        lexed = tokenize(text, source)
        super().__init__(lexed.tokens, text.split("\n"), source, ops)
        self.prelude_globals: set[str] = set()
        if constants is not None:
            self.constants = [np.asarray(c) for c in constants]
        elif lexed.metadata is not None:
            self.constants = decode_metadata(lexed.metadata, source, lexed.metadata_line)
        else:
            self.constants = None
        if prelude is not None:
            for gtv, td in prelude.type_definitions.items():
                self.adts[gtv.name] = gtv
                for c in td.constructors:
                    self.constructors[c.name] = c
                self.adt_arity[gtv.name] = len(td.type_vars)
            self.prelude_globals = {g.name_hint for g in prelude.functions}

    # ---- top level ------------------------------------------------------------------------

    def header(self) -> None:
        if not self.at("#["):
            return
        self.next()
        self.expect_word("version")
        self.expect("=")
        v = self.tok
        if v.kind != STRING:
            self.fail(f"expected a version string, found {describe(v)}")
        if v.value not in SUPPORTED_VERSIONS:
            supported = ", ".join(SUPPORTED_VERSIONS)
            self.fail(f"unsupported text format version {v.value!r} (supported: {supported})")
        self.next()
        self.expect("]", "to close the version header")

    def module(self) -> IRModule:
        self.header()
        items = self._scan_top_level()
        tdefs: dict[GlobalTypeVar, TypeData] = {}
        seen: set[str] = set()
        for kind, start in items:
            if kind in ("type", "extern"):
                name_tok = self.toks[start + (kind == "extern") + 1]
                if name_tok.text in seen:
                    self.fail(f"type {name_tok.text} is defined twice", name_tok)
                seen.add(name_tok.text)
                self.adts[name_tok.text] = GlobalTypeVar(name_tok.text)
                self.adt_arity[name_tok.text] = self._count_type_params(start + (kind == "extern") + 2)
        for kind, start in items:
            if kind in ("type", "extern"):
                self.i = start
                td = self.type_def()
                tdefs[td.header] = td
        fns: dict[GlobalVar, Function] = {}
        for kind, start in items:
            if kind == "def":
                self.i = start
                gv, fn, tok = self.def_()
                if gv in fns:
                    self.fail(f"global @{gv.name_hint} is defined twice", tok)
                fns[gv] = fn
        defined = {g.name_hint for g in fns} | self.prelude_globals
        for name, tok in self.global_refs:
            if name not in defined:
                self.fail(f"unknown global @{name}", tok)
        return IRModule(fns, tdefs)

    def _count_type_params(self, i: int) -> int:
        """How many names the `[A, B]` at token `i` lists (0 if there is none there)."""
        if not self.toks[i].is_punct("["):
            return 0
        n = 0
        while self.toks[i + 1].kind == IDENT:
            n += 1
            i += 2
            if not self.toks[i].is_punct(","):
                break
        return n

    def _scan_top_level(self) -> list[tuple[str, int]]:
        """Start index of every top-level `def` / `type` / `extern type`; each `def` and `type` is
        skipped by brace matching, an `extern type` by its header."""
        items: list[tuple[str, int]] = []
        while self.tok.kind != "eof":
            t = self.tok
            if t.is_word("extern"):
                items.append(("extern", self.i))
                self._skip_extern()
                continue
            if not (t.is_word("def") or t.is_word("type")):
                self.fail(f"expected 'def' or 'type' (or 'extern type') at top level, found {describe(t)}")
            if t.is_word("type") and self.peek().kind != IDENT:
                self.fail(f"expected a type name after 'type', found {describe(self.peek())}", self.peek())
            items.append((t.text, self.i))
            while not self.at("{"):
                if self.tok.kind == "eof" or (self.i > items[-1][1] and self.tok.is_word(t.text)):
                    self.fail(f"expected '{{' to start the body of this {t.text}", t)
                self.next()
            open_tok, depth = self.next(), 1
            while depth:
                if self.tok.kind == "eof":
                    self.fail("missing '}': this '{' is never closed", open_tok)
                tk = self.next()
                depth += tk.is_punct("{") - tk.is_punct("}")
        return items

    def _skip_extern(self) -> None:
        """Past `extern type Name[A, …]` and its optional `;` (checked again when parsed)."""
        self.next()
        self.expect_word("type")
        if self.tok.kind != IDENT:
            self.fail(f"expected a type name after 'extern type', found {describe(self.tok)}")
        self.next()
        if self.accept("["):
            while not self.at("]") and self.tok.kind != "eof":
                self.next()
            self.expect("]", "to close the type parameters")
        if self.at("{"):
            self.fail("an extern type has no constructors: write 'type' to define them")
        self.accept(";")

    def type_def(self) -> TypeData:
        extern = self.tok.is_word("extern")
        if extern:
            self.next()
        self.expect_word("type")
        gtv = self.adts[self.next().text]
        tvars = self.parse_type_params() if self.at("[") else []
        if not tvars:
            self.type_scopes.append({})
        if extern:
            self.type_scopes.pop()
            return TypeData(gtv, tuple(tvars), ())
        self.expect("{")
        ctors: list[Constructor] = []

        def ctor() -> Constructor:
            t = self.tok
            if t.kind != IDENT or "." in t.text:
                self.fail(f"expected a constructor name, found {describe(t)}")
            if t.text in self.constructors:
                self.fail(f"constructor {t.text} is defined twice", t)
            self.next()
            inputs = self.comma_list(")", self.parse_type) if self.accept("(") else []
            c = Constructor(t.text, tuple(inputs), gtv, len(ctors)).with_span(self.span(t))
            self.constructors[c.name] = c
            ctors.append(c)
            return c

        self.comma_list("}", ctor)
        self.type_scopes.pop()
        return TypeData(gtv, tuple(tvars), tuple(ctors))

    def def_(self) -> tuple[GlobalVar, Function, Token]:
        start = self.expect_word("def")
        name = self.tok
        if name.kind != GLOBAL:
            self.fail(f"expected a global name like @main after 'def', found {describe(name)}")
        self.next()
        fn = self.function_rest(start)
        return GlobalVar(name.text[1:]), fn, name


@deep
def parse(text: str, source: str = "<string>", constants: Sequence[np.ndarray] | None = None,
          prelude: IRModule | None = None, *, ops: OpResolver) -> IRModule:
    """Parse a whole program (`def`s and `type`s) into an IRModule.

    `ops` resolves operator names (`autorelay.ir.op_resolver`). `constants` supplies the arrays of
    `meta[relay.Constant][i]` (otherwise the text's own `#[metadata]` section is used). With a
    `prelude` module, its ADTs and functions are in scope and merged into the result.
    """
    p = Parser(text, source, constants, prelude, ops)
    mod = p.module()
    return prelude.merge(mod) if prelude is not None else mod


@deep
def parse_expr(text: str, source: str = "<string>", constants: Sequence[np.ndarray] | None = None,
               prelude: IRModule | None = None, free_vars: Mapping[str, Var] | Iterable[Var] | None = None,
               *, ops: OpResolver) -> Expr:
    """Parse one expression (statements allowed: `%0 = …; let %x = …; result`).

    `free_vars` puts existing variables in scope by name (`%x` finds the Var named `x`), so that
    an expression with free variables can be read back. Globals are not checked for existence.
    """
    p = Parser(text, source, constants, prelude, ops)
    p.header()
    if free_vars is not None:
        items = free_vars.items() if isinstance(free_vars, Mapping) else ((v.name_hint, v) for v in free_vars)
        p.free_scope.update({"%" + k.lstrip("%"): v for k, v in items})
    e = p.body()
    if p.tok.kind != "eof":
        p.fail(f"unexpected {describe(p.tok)} after the expression")
    return e
