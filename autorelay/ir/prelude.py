"""The prelude: List, Option, Tree and Nat, and the usual list functions, written in Relay text.

`prelude.rly` ships with the package and is parsed on first use (then cached: modules are values,
so sharing one is safe). `parse(text, prelude=True)` puts it in scope for a user program.
"""

from __future__ import annotations

import functools
from importlib import resources

from autorelay.ir.module import IRModule

PRELUDE_FILE = "prelude.rly"
ADTS = ("List", "Option", "Tree", "Nat")
FUNCTIONS = ("map", "foldl", "foldr", "length", "nth", "concat", "filter", "zip", "sum")


def prelude_text() -> str:
    return resources.files("autorelay.ir").joinpath(PRELUDE_FILE).read_text(encoding="utf-8")


@functools.cache
def load_prelude() -> IRModule:
    """The parsed prelude module (parsed once per process)."""
    from autorelay.ir.parser import parse

    return parse(prelude_text(), source=PRELUDE_FILE)
