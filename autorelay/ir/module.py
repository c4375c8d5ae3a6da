"""IRModule: the unit of compilation — global functions and ADT definitions, looked up by name.

A module is treated as a value: the `with_*` methods return a new module and never modify the
receiver, so a pass can hold on to its input while building its output.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from autorelay.ir.expr import Constructor, Function, GlobalVar
from autorelay.ir.types import GlobalTypeVar, TypeData


class IRModule:
    __slots__ = ("functions", "type_definitions")

    def __init__(
        self,
        functions: Mapping[GlobalVar | str, Function] | None = None,
        type_definitions: Mapping[GlobalTypeVar | str, TypeData] | None = None,
    ) -> None:
        fns: dict[GlobalVar, Function] = {}
        for k, v in (functions or {}).items():
            gv = GlobalVar(k) if isinstance(k, str) else k
            if not isinstance(v, Function):
                raise TypeError(f"global @{gv.name_hint} must be a Function, got {type(v).__name__}")
            fns[gv] = v
        tds: dict[GlobalTypeVar, TypeData] = {}
        for k, v in (type_definitions or {}).items():
            tds[GlobalTypeVar(k) if isinstance(k, str) else k] = v
        self.functions = fns
        self.type_definitions = tds

    # ---- construction -------------------------------------------------------------------

    @staticmethod
    def from_expr(fn: Function, entry: str = "main") -> IRModule:
        return IRModule({GlobalVar(entry): fn})

    def with_function(self, name: GlobalVar | str, fn: Function) -> IRModule:
        gv = GlobalVar(name) if isinstance(name, str) else name
        fns = dict(self.functions)
        fns[gv] = fn
        return IRModule(fns, self.type_definitions)

    def with_functions(self, functions: Mapping[GlobalVar, Function]) -> IRModule:
        fns = dict(self.functions)
        fns.update(functions)
        return IRModule(fns, self.type_definitions)

    def with_type(self, data: TypeData) -> IRModule:
        tds = dict(self.type_definitions)
        tds[data.header] = data
        return IRModule(self.functions, tds)

    def without_function(self, name: GlobalVar | str) -> IRModule:
        gv = GlobalVar(name) if isinstance(name, str) else name
        return IRModule({k: v for k, v in self.functions.items() if k != gv}, self.type_definitions)

    def merge(self, other: IRModule) -> IRModule:
        """Definitions of `other` added to this module's (other's win on a name clash)."""
        fns = dict(self.functions)
        fns.update(other.functions)
        tds = dict(self.type_definitions)
        tds.update(other.type_definitions)
        return IRModule(fns, tds)

    # ---- lookup -------------------------------------------------------------------------

    def __getitem__(self, name: GlobalVar | str) -> Function:
        gv = GlobalVar(name) if isinstance(name, str) else name
        try:
            return self.functions[gv]
        except KeyError:
            raise KeyError(f"no global function @{gv.name_hint} in module") from None

    def __contains__(self, name: GlobalVar | str) -> bool:
        gv = GlobalVar(name) if isinstance(name, str) else name
        return gv in self.functions

    def __iter__(self) -> Iterator[GlobalVar]:
        return iter(self.functions)

    def get_global_var(self, name: str) -> GlobalVar:
        gv = GlobalVar(name)
        if gv not in self.functions:
            raise KeyError(f"no global function @{name} in module")
        return gv

    def get_type(self, name: str) -> TypeData:
        gtv = GlobalTypeVar(name)
        try:
            return self.type_definitions[gtv]
        except KeyError:
            raise KeyError(f"no type definition {name} in module") from None

    def constructors(self) -> dict[str, Constructor]:
        """Every constructor of every ADT, by name."""
        out: dict[str, Constructor] = {}
        for td in self.type_definitions.values():
            for c in td.constructors:
                out[c.name] = c
        return out

    def get_constructor(self, name: str) -> Constructor:
        try:
            return self.constructors()[name]
        except KeyError:
            raise KeyError(f"no constructor {name} in module") from None

    def astext(self) -> str:
        from autorelay.ir.printer import astext

        return astext(self)

    def __str__(self) -> str:
        return self.astext()

    def __repr__(self) -> str:
        names = ", ".join("@" + g.name_hint for g in self.functions)
        types = ", ".join(t.name for t in self.type_definitions)
        return f"IRModule(functions=[{names}], types=[{types}])"
