"""The prelude: List, Option, Tree and Nat, and the usual list functions, written in Relay text.

`prelude.rly` ships with the package and is parsed on first use (then cached per operator
resolver: modules are values, so sharing one is safe). `autorelay.load_prelude()` and
`autorelay.parse(text, prelude=True)` use the op library's resolver.
"""

from __future__ import annotations

import functools
from importlib import resources

from autorelay.ir.module import IRModule
from autorelay.ir.op_resolver import OpResolver
from autorelay.ir.parser import parse

PRELUDE_FILE = "prelude.rly"
ADTS = ("List", "Option", "Tree", "Nat")
FUNCTIONS = ("map", "foldl", "foldr", "length", "nth", "concat", "filter", "zip", "sum")


def prelude_text() -> str:
    return resources.files("autorelay.ir").joinpath(PRELUDE_FILE).read_text(encoding="utf-8")


@functools.cache
def load_prelude(ops: OpResolver) -> IRModule:
    """The parsed prelude module (parsed once per process and resolver); `ops` must know the
    operators it calls (add, subtract, equal)."""
    return parse(prelude_text(), source=PRELUDE_FILE, ops=ops)
