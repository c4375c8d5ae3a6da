"""Printer of the Relay text format (0.0.5): `astext(module_or_expr)` and `type_to_text(type)`.

The output parses back (`autorelay.ir.parser`) to a structurally equal program:

* DAG sharing prints as `%N = …;` graph bindings (see `print_layout` for where each one goes);
  lets print as `let %x = …;`.
* Variables keep their name hints, made unique per `def` so that no name is ever captured. Dotted
  hints from PyTorch imports (`input.1`, `conv1.weight`) keep their dots; other characters become
  `_`. A projection prints as `%x.0`, or as `(%x).0` where a variable named `x.0` exists, since the
  parser reads a dotted token as the longest bound name (see `ExprParser.local_ref`).
* Scalar constants print as literals (`1f`, `-3i64`, `True`); other constants as
  `meta[relay.Constant][i]` with a `#[metadata]` section holding the arrays.
* With `show_types=True`, each binding and block result carries its checked type in a
  `/* ty=… */` comment, which the parser skips.
* An expression's free variables are declared first, `free_var %x: T;`, as Relay prints them.
* A let of an unannotated variable named `_` that nothing refers to prints as the sequence
  `value;` (Relay's `e1; e2`).
* Infix operators in the text (`%a + %b`) are sugar for op calls and print as calls (`add(%a, %b)`),
  as Relay's printer does.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np

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
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from autorelay.ir.metadata import encode_metadata
from autorelay.ir.module import IRModule
from autorelay.ir.print_layout import ATOMS, Layout, Scope
from autorelay.ir.types import (
    AnyDim,
    FuncType,
    GlobalTypeVar,
    IncompleteType,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeData,
    TypeVar,
)
from autorelay.ir.visitor import free_vars
from autorelay.utils.deep import deep

VERSION_HEADER = '#[version = "0.0.5"]'
_WRAP = 90
_INT_SUFFIX = {"int32": "", "int64": "i64", "int8": "i8", "int16": "i16",
               "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}
_FLOAT_SUFFIX = {"float32": "f", "float16": "f16", "float64": "f64"}


# ---- types, literals, attribute values ---------------------------------------------------------


def type_to_text(t: Type | None, hole: bool = False) -> str:
    """A type in the text syntax. `hole=True` prints an IncompleteType as `_` (parseable)."""
    if t is None:
        return "_"
    if isinstance(t, TensorType):
        if not t.shape:
            return t.dtype
        dims = ", ".join(str(d) for d in t.shape)
        return f"Tensor[({dims}), {t.dtype}]"
    if isinstance(t, TupleType):
        inner = ", ".join(type_to_text(f, hole) for f in t.fields)
        return f"({inner},)" if len(t.fields) == 1 else f"({inner})"
    if isinstance(t, FuncType):
        tp = f"[{', '.join(p.name for p in t.type_params)}]" if t.type_params else ""
        args = ", ".join(type_to_text(a, hole) for a in t.arg_types)
        return f"fn {tp}({args}) -> {type_to_text(t.ret_type, hole)}"
    if isinstance(t, TypeVar | GlobalTypeVar):
        return t.name
    if isinstance(t, TypeCall):
        if not t.args:
            return t.func.name
        return f"{t.func.name}[{', '.join(type_to_text(a, hole) for a in t.args)}]"
    if isinstance(t, RefType):
        return f"Ref[{type_to_text(t.value, hole)}]"
    if isinstance(t, IncompleteType):
        return "_" if hole else f"?t{t.id}"
    if isinstance(t, AnyDim):
        return "?"
    raise TypeError(f"cannot print type {t!r}")


def literal_text(arr: np.ndarray) -> str | None:
    """A 0-d array as a literal (`1f`, `2.5f16`, `-3i64`, `True`), or None if it has none."""
    if arr.ndim != 0:
        return None
    dt = str(arr.dtype)
    v = arr.item()
    if dt == "bool":
        return "True" if v else "False"
    if dt in _INT_SUFFIX:
        return f"{int(v)}{_INT_SUFFIX[dt]}"
    if dt in _FLOAT_SUFFIX:
        if not math.isfinite(v):
            return None
        # numpy's str() of a float16/32 scalar is the shortest text that reads back exactly.
        text = repr(float(v)) if dt == "float64" else str(arr.dtype.type(v))
        if text.endswith(".0"):
            text = text[:-2]
        return text + _FLOAT_SUFFIX[dt]
    return None


def attr_text(v: object) -> str:
    if v is None:
        return "None"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            raise ValueError("cannot print a NaN attribute value")
        if math.isinf(v):
            return "1e999f" if v > 0 else "-1e999f"
        text = repr(v)
        return (text[:-2] if text.endswith(".0") else text) + "f"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, tuple | list):
        return "[" + ", ".join(attr_text(x) for x in v) + "]"
    raise ValueError(f"cannot print attribute value {v!r} of type {type(v).__name__}")


def _indent(lines: list[str]) -> str:
    return "\n".join("  " + line.replace("\n", "\n  ") for line in lines)


# ---- expressions ---------------------------------------------------------------------------------


_NAME = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")


def local_name(hint: str) -> str:
    """A name the parser reads back as one variable: `[A-Za-z0-9_]` segments joined by single
    dots (so `input.1` and `conv1.weight` survive), not starting with a digits-only segment
    (`%0` and `%0.1` are graph bindings and their projections)."""
    base = re.sub(r"[^A-Za-z0-9_.]", "_", hint)
    if not _NAME.fullmatch(base):
        base = base.replace(".", "_")
    if not base or base.split(".")[0].isdigit():
        base = "v" + base
    return base


def _is_variable_ref(text: str) -> bool:
    """`%x` or `%conv1.weight` (a variable), not `%3` (a graph binding) or a longer expression."""
    return text.startswith("%") and bool(_NAME.fullmatch(text[1:])) and not text[1:].split(".")[0].isdigit()


class _Printer:
    """Prints one root (a global function or an expression); shares constants across roots."""

    def __init__(self, root: Expr, constants: list[np.ndarray], const_index: dict[int, int],
                 show_types: bool) -> None:
        self.layout = Layout(root)
        self.constants = constants
        self.const_index = const_index
        self.show_types = show_types
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.projections: set[str] = set()  # `x.0` for each `%x.0` printed: never a variable name
        self.counter = 0
        self.open: dict[Scope, list[str]] = {}
        self.referenced: set[int] = set()  # ids of the variables printed as a reference

    # -- names --
    def bind_var(self, v: Var) -> str:
        base = local_name(v.name_hint)
        name, k = base, 0
        while name in self.used or name in self.projections:  # `x.0` after `%x.0` was printed
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        self.names[id(v)] = "%" + name
        return "%" + name

    def var_decl(self, v: Var) -> str:
        name = self.bind_var(v)
        if v.type_annotation is None:
            return name + self.ty(v)
        return f"{name}: {type_to_text(v.type_annotation, hole=True)}"

    def ty(self, e: Expr) -> str:
        if self.show_types and e.has_checked_type:
            return f" /* ty={type_to_text(e.checked_type, hole=True)} */"
        return ""

    # -- blocks --
    def block(self, expr: Expr, scope: Scope, first_let_is_statement: bool = False) -> list[str]:
        lines: list[str] = []
        self.open[scope] = lines
        sequenced: list[tuple[int, Var, str]] = []  # `let %_ = e;` lines that may print as `e;`
        e = expr
        while isinstance(e, Let) and (first_let_is_statement or self.layout.is_statement_let(e)):
            first_let_is_statement = False
            decl = self.var_decl(e.var)
            value = self.inline(e.value) if not self.layout.is_bound(e.value) else self.ref(e.value)
            if e.var.name_hint == "_" and e.var.type_annotation is None:
                sequenced.append((len(lines), e.var, f"{value}{self.ty(e.value)};"))
            lines.append(f"let {decl} = {value}{self.ty(e.value)};")
            e = e.body
        lines.append(self.ref(e) + self.ty(e))
        for k, var, statement in sequenced:
            if id(var) not in self.referenced:
                lines[k] = statement
        del self.open[scope]
        return lines

    def ref(self, e: Expr) -> str:
        """Text that refers to `e` here: an atom, a graph-binding name, or `e` printed inline."""
        if isinstance(e, ATOMS):
            return self.atom(e)
        if not self.layout.is_bound(e):
            return self.inline(e)
        name = self.names.get(id(e))
        if name is None:
            text = self.inline(e)
            while str(self.counter) in self.used:
                self.counter += 1
            name = f"%{self.counter}"
            self.counter += 1
            self.names[id(e)] = name
            self.open[self.layout.scope[id(e)]].append(f"{name} = {text}{self.ty(e)};")
        return name

    def atom(self, e: Expr) -> str:
        if isinstance(e, Var):
            self.referenced.add(id(e))
            name = self.names.get(id(e))
            return name if name is not None else self.bind_var(e)  # a free variable
        if isinstance(e, GlobalVar):
            return "@" + e.name_hint
        if isinstance(e, Op):
            return e.name
        if isinstance(e, Constructor):
            return e.name
        assert isinstance(e, Constant)
        lit = literal_text(e.data)
        if lit is not None:
            return lit
        idx = self.const_index.get(id(e))
        if idx is None:
            idx = self.const_index[id(e)] = len(self.constants)
            self.constants.append(e.data)
        return f"meta[relay.Constant][{idx}]"

    def operand(self, e: Expr) -> str:
        """`e` as the callee or the tuple of a projection: parenthesised unless it is simple."""
        text = self.ref(e)
        if isinstance(e, ATOMS + (Tuple,)) or self.layout.is_bound(e) or isinstance(e, Call):
            return text
        return f"({text})"

    def projection(self, e: TupleGetItem) -> str:
        """`%x.0`, unless a variable named `x.0` would capture that text: then `(%x).0`."""
        base = self.operand(e.tuple_value)
        if _is_variable_ref(base):
            dotted = f"{base[1:]}.{e.index}"
            if dotted in self.used:
                return f"({base}).{e.index}"
            self.projections.add(dotted)
        return f"{base}.{e.index}"

    def inline(self, e: Expr) -> str:
        if isinstance(e, ATOMS):
            return self.atom(e)
        if isinstance(e, Call):
            args = [self.ref(a) for a in e.args]
            args += [f"{k}={attr_text(v)}" for k, v in e.attrs.items()]
            return f"{self.operand(e.op)}({', '.join(args)})"
        if isinstance(e, Tuple):
            fields = [self.ref(f) for f in e.fields]
            return f"({fields[0]},)" if len(fields) == 1 else f"({', '.join(fields)})"
        if isinstance(e, TupleGetItem):
            return self.projection(e)
        if isinstance(e, Function):
            return "fn " + self.function(e)
        if isinstance(e, If):
            cond = self.ref(e.cond)
            t = self.block(e.true_branch, self.layout.child_scope[(id(e), 0)])
            f = self.block(e.false_branch, self.layout.child_scope[(id(e), 1)])
            return f"if ({cond}) {{\n{_indent(t)}\n}} else {{\n{_indent(f)}\n}}"
        if isinstance(e, Match):
            return self.match(e)
        if isinstance(e, Let):
            lines = self.block(e, self.layout.child_scope[(id(e), 0)], first_let_is_statement=True)
            return f"(\n{_indent(lines)}\n)"
        if isinstance(e, RefCreate):
            return f"ref({self.ref(e.value)})"
        if isinstance(e, RefRead):
            return f"ref_read({self.ref(e.ref)})"
        if isinstance(e, RefWrite):
            return f"ref_write({self.ref(e.ref)}, {self.ref(e.value)})"
        raise TypeError(f"cannot print {type(e).__name__}")

    def function(self, f: Function) -> str:
        """`[A](%x: T, Primitive=1) -> R {…}` (the caller writes `fn` or `def @name`)."""
        tp = f"[{', '.join(p.name for p in f.type_params)}]" if f.type_params else ""
        params = [self.var_decl(p) for p in f.params]
        params += [f"{k}={attr_text(v)}" for k, v in f.attrs.items()]
        ret = f" -> {type_to_text(f.ret_type, hole=True)}" if f.ret_type is not None else ""
        body = self.block(f.body, self.layout.child_scope[(id(f), 0)])
        plist = ", ".join(params)
        if len(plist) > _WRAP:  # one parameter per line keeps wide signatures readable
            plist = "\n" + _indent([p + "," for p in params]) + "\n"
        return f"{tp}({plist}){ret} {{\n{_indent(body)}\n}}"

    def match(self, m: Match) -> str:
        head = f"match{'' if m.complete else '?'} ({self.ref(m.data)}) {{"
        clauses = []
        for k, c in enumerate(m.clauses):
            pat = self.pattern(c.lhs)
            lines = self.block(c.rhs, self.layout.child_scope[(id(m), k)])
            if len(lines) == 1:
                clauses.append(f"{pat} => {lines[0]},")
            else:
                clauses.append(f"{pat} => {{\n{_indent(lines)}\n}},")
        return head + "\n" + _indent(clauses) + "\n}"

    def pattern(self, p: Pattern) -> str:
        if isinstance(p, PatternWildcard):
            return "_"
        if isinstance(p, PatternVar):
            return self.var_decl(p.var)
        if isinstance(p, PatternConstructor):
            if not p.patterns:
                return p.constructor.name
            return f"{p.constructor.name}({', '.join(self.pattern(s) for s in p.patterns)})"
        if isinstance(p, PatternTuple):
            subs = [self.pattern(s) for s in p.patterns]
            return f"({subs[0]},)" if len(subs) == 1 else f"({', '.join(subs)})"
        raise TypeError(f"cannot print pattern {type(p).__name__}")


def type_def_text(td: TypeData) -> str:
    tp = f"[{', '.join(v.name for v in td.type_vars)}]" if td.type_vars else ""
    ctors = []
    for c in td.constructors:
        args = f"({', '.join(type_to_text(t, hole=True) for t in c.inputs)})" if c.inputs else ""
        ctors.append(f"{c.name}{args},")
    if not ctors:  # an extern type too: Relay prints both as an empty definition
        return f"type {td.header.name}{tp} {{}}"
    return f"type {td.header.name}{tp} {{\n{_indent(ctors)}\n}}"


@deep
def astext(node: IRModule | Expr, show_types: bool = False) -> str:
    """The program in the Relay text format; `parse`/`parse_expr` read it back."""
    constants: list[np.ndarray] = []
    const_index: dict[int, int] = {}
    parts = [VERSION_HEADER]
    if isinstance(node, IRModule):
        parts += [type_def_text(td) for td in node.type_definitions.values()]
        for gv, fn in node.functions.items():
            p = _Printer(fn, constants, const_index, show_types)
            parts.append(f"def @{gv.name_hint}{p.function(fn)}")
    elif isinstance(node, Expr):
        p = _Printer(node, constants, const_index, show_types)
        decls = [f"free_var {p.var_decl(v)};" for v in free_vars(node)]
        parts.append("\n".join(decls + p.block(node, p.layout.root_scope)))
    else:
        raise TypeError(f"astext expects an IRModule or an Expr, got {type(node).__name__}")
    text = "\n\n".join(parts) + "\n"
    if constants:
        text += "\n#[metadata]\n" + encode_metadata(constants)
    return text
