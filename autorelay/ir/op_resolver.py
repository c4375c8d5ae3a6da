"""How the text parser learns which operators exist: a resolver passed in, never an import.

The op library depends on the IR, so the IR must not depend on the op library. The parser needs,
for each operator name it meets, the operator's argument names and attribute schema (to build the
call as `registry.call` does and to point at a bad attribute); whoever calls the parser passes an
`OpResolver` that answers this. `autorelay.text_format` wires in the op library's registry for
the public `autorelay.parse` / `autorelay.parse_expr`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from autorelay.ir.attrs import Attrs


class OpSchema(Protocol):
    """What the parser needs to know of one operator (`autorelay.op.OpDef` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def arg_names(self) -> tuple[str, ...]: ...

    @property
    def attrs(self) -> Mapping[str, Any]:
        """Attribute name -> default."""
        ...

    def make_attrs(self, given: Mapping[str, Any] | None = None) -> Attrs:
        """Validated attributes with defaults filled; raises (any exception) on a bad value."""
        ...


OpResolver = Callable[[str], "OpSchema | None"]
"""`resolve(name)`: the operator's schema, or None when no operator has that name (the parser
then reports `unknown operator <name>` at the name's line and column)."""


def no_ops(name: str) -> None:
    """A resolver that knows no operator: for text that names none (type definitions, ADTs)."""
    return None
