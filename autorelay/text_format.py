"""The Relay text format with the op library in scope: `parse`, `parse_expr`, `load_prelude`.

`autorelay.ir.parser` takes the operators it may name as an argument (an `OpResolver`), so the IR
does not depend on the op library; this module is where the two meet, and what `autorelay.parse`,
`autorelay.parse_expr` and `autorelay.load_prelude` are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from autorelay.ir import parser as _parser
from autorelay.ir import prelude as _prelude
from autorelay.ir.expr import Expr, Var
from autorelay.ir.module import IRModule
from autorelay.op.registry import OpDef, exists, get


def resolve_op(name: str) -> OpDef | None:
    """The op library's `OpResolver`: the registered `OpDef` of `name`, or None."""
    return get(name) if exists(name) else None


def load_prelude() -> IRModule:
    """The prelude module (List, Option, Tree, Nat and the list functions), parsed once."""
    return _prelude.load_prelude(resolve_op)


def parse(text: str, source: str = "<string>", constants: Sequence[np.ndarray] | None = None,
          prelude: bool = False) -> IRModule:
    """Parse a whole program (`def`s and `type`s) into an IRModule.

    `constants` supplies the arrays of `meta[relay.Constant][i]` (otherwise the text's own
    `#[metadata]` section is used). With `prelude=True` the prelude's ADTs and functions are in
    scope and merged into the result.
    """
    pmod = load_prelude() if prelude else None
    return _parser.parse(text, source, constants, pmod, ops=resolve_op)


def parse_expr(text: str, source: str = "<string>", constants: Sequence[np.ndarray] | None = None,
               prelude: bool = False, free_vars: Mapping[str, Var] | Iterable[Var] | None = None) -> Expr:
    """Parse one expression (statements allowed: `free_var %x: T; %0 = …; let %y = …; result`).

    `free_vars` puts existing variables in scope by name (`%x` finds the Var named `x`), so that
    an expression with free variables can be read back. Globals are not checked for existence.
    """
    pmod = load_prelude() if prelude else None
    return _parser.parse_expr(text, source, constants, pmod, free_vars, ops=resolve_op)
