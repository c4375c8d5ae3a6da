"""The parser takes its operators from a resolver: the IR never imports the op library."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from autorelay.errors import ParseError
from autorelay.ir import Call, Op, Var
from autorelay.ir.attrs import Attrs
from autorelay.ir.op_resolver import no_ops
from autorelay.ir.parser import parse, parse_expr

IR_DIR = Path(__file__).resolve().parents[2] / "autorelay" / "ir"


@dataclass(frozen=True)
class Schema:
    name: str
    arg_names: tuple[str, ...]
    attrs: dict = field(default_factory=dict)

    def make_attrs(self, given=None):
        full = dict(self.attrs)
        full.update(given or {})
        if full.get("k", 0) < 0:
            raise ValueError("k must be >= 0")
        return Attrs(full)


TOY = {"twice": Schema("twice", ("x",), {"k": 2})}


def test_no_module_under_ir_imports_the_op_library():
    offenders = []
    for path in sorted(IR_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # function-local too
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            offenders += [f"{path.name}: {n}" for n in names if (n + ".").startswith("autorelay.op.")]
    assert offenders == []


def test_parsing_with_a_toy_resolver_loads_no_op_module():
    code = (
        "import sys, types\n"
        "from autorelay.ir import Var\n"
        "from autorelay.ir.attrs import Attrs\n"
        "from autorelay.ir.parser import parse_expr\n"
        "s = types.SimpleNamespace(name='twice', arg_names=('x',), attrs={'k': 2},\n"
        "                          make_attrs=lambda given=None: Attrs({'k': 2, **(given or {})}))\n"
        "e = parse_expr('twice(%x, k=3)', free_vars=[Var('x')], ops={'twice': s}.get)\n"
        "assert e.attrs['k'] == 3\n"
        "print(sorted(m for m in sys.modules if m.startswith('autorelay.op')))\n"
    )
    root = IR_DIR.parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    assert out.stdout.strip() == "[]"


def test_the_resolver_decides_which_names_are_operators():
    x = Var("x")
    e = parse_expr("twice(%x)", free_vars=[x], ops=TOY.get)
    assert isinstance(e, Call) and e.op == Op("twice") and e.args == (x,) and e.attrs["k"] == 2
    with pytest.raises(ParseError) as err:
        parse_expr("add(%x, %x)", free_vars=[x], ops=TOY.get)  # a real op, but not this resolver's
    assert "unknown operator add" in err.value.message and (err.value.line, err.value.column) == (1, 1)


def test_schema_errors_are_located():
    x = Var("x")
    with pytest.raises(ParseError) as err:
        parse_expr("twice(%x, k=-1)", free_vars=[x], ops=TOY.get)
    assert "bad attributes for twice: k must be >= 0" in err.value.message
    with pytest.raises(ParseError) as err:
        parse_expr("\n  twice(%x, %x)", free_vars=[x], ops=TOY.get)
    assert "twice takes 1 argument(s) (x), got 2" in err.value.message
    assert (err.value.line, err.value.column) == (2, 3)


def test_text_without_operators_needs_none():
    mod = parse('#[version = "0.0.5"]\ntype Box[A] { MkBox(A) }\ndef @id(%x: Box[int32]) { %x }', ops=no_ops)
    assert [g.name_hint for g in mod.functions] == ["id"]


def test_an_infix_operator_needs_its_op_from_the_resolver():
    x = Var("x")
    with pytest.raises(ParseError) as err:
        parse_expr("twice(%x)\n  + %x", free_vars=[x], ops=TOY.get)
    assert "'+' stands for the operator add, which is not known here" in err.value.message
    assert (err.value.line, err.value.column) == (2, 3)
