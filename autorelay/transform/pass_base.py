"""Passes are values; pipelines are explicit lists of them.

A pass is a frozen dataclass: its class fixes the `name`, its fields are the typed options
(`FuseOps(plan=FusionPlan(max_depth=8))`). Two flavours:

* `ModulePass` rewrites a whole `IRModule` (`transform_module`), e.g. inlining across globals.
* `FunctionPass` rewrites each global function on its own (`transform_function`); primitive
  functions produced by fusion are left alone unless the pass says otherwise.

`Pipeline([...])` runs a list in order. Before a pass that declares `requires_types` it makes sure
the module is typed, and (with `verify=True`, the default) it re-infers types after *every* pass,
so a pass that produces ill-typed IR is stopped at once with a `PassError` naming it. It records
each pass's wall time and op counts before/after, and can dump the IR after chosen passes.
There is no opt level: what a pipeline runs is exactly its list (see `pipelines.py`). Given a
`PassMemo`, a pipeline resumes from what equal first passes of an earlier pipeline produced on the
same module (`pass_memo.py`: a search prepares one model under many pipelines).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from autorelay.errors import AutoRelayError, TypeCheckError
from autorelay.ir.expr import Function, GlobalVar
from autorelay.ir.module import IRModule
from autorelay.transform.pass_memo import PassMemo
from autorelay.transform.util import count_ops, primitive_functions
from autorelay.utils.deep import run_deep


class PassError(AutoRelayError):
    """A pass failed or produced an ill-typed module; `pass_name` says which pass."""

    def __init__(self, pass_name: str, message: str) -> None:
        self.pass_name = pass_name
        super().__init__(f"pass {pass_name}: {message}")


@dataclass(frozen=True)
class Pass:
    """Base of all passes. Subclasses are frozen dataclasses whose fields are their options."""

    name: ClassVar[str] = "Pass"
    requires_types: ClassVar[bool] = False  # the pipeline infers types before running it

    def transform_module(self, mod: IRModule) -> IRModule:
        raise NotImplementedError(f"{type(self).__name__} does not implement transform_module")

    def __call__(self, mod: IRModule) -> IRModule:
        """Run this pass alone (types are inferred first when the pass needs them)."""
        if self.requires_types:
            mod = infer_module_types(mod, self.name, before=True)
        return run_deep(self.transform_module, mod)


@dataclass(frozen=True)
class ModulePass(Pass):
    """A pass that sees the whole module (it may add, drop or rewrite several globals)."""


@dataclass(frozen=True)
class FunctionPass(Pass):
    """A pass that rewrites every global function independently."""

    skip_primitive: ClassVar[bool] = True

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        raise NotImplementedError(f"{type(self).__name__} does not implement transform_function")

    def transform_module(self, mod: IRModule) -> IRModule:
        out = {}
        for gv, fn in mod.functions.items():
            if self.skip_primitive and fn.is_primitive:
                out[gv] = fn
            else:
                out[gv] = self.transform_function(fn, mod, gv)
        return IRModule(out, mod.type_definitions)


def infer_module_types(mod: IRModule, pass_name: str, before: bool) -> IRModule:
    """`infer_types(mod)`, with a type error reported as the fault of the pass that caused it."""
    from autorelay.typing import infer_types

    try:
        return infer_types(mod)
    except TypeCheckError as e:
        when = "its input is ill-typed" if before else "it produced ill-typed IR"
        raise PassError(pass_name, f"{when}: {e}") from e


@dataclass(frozen=True)
class PassRecord:
    """What one pass did: wall time (seconds, type inference excluded) and op counts."""

    name: str
    seconds: float
    ops_before: int
    ops_after: int
    typecheck_seconds: float = 0.0
    primitive_functions: int = 0


@dataclass
class PipelineResult:
    module: IRModule
    records: list[PassRecord]
    dumps: dict[str, str] = field(default_factory=dict)

    @property
    def total_seconds(self) -> float:
        return sum(r.seconds + r.typecheck_seconds for r in self.records)

    def report(self) -> str:
        """A table: one row per pass with its time and op counts."""
        head = f"{'pass':<28}{'time ms':>10}{'types ms':>10}{'ops before':>12}{'ops after':>11}"
        lines = [head + f"{'prim fns':>10}"]
        for r in self.records:
            lines.append(
                f"{r.name:<28}{r.seconds * 1e3:>10.1f}{r.typecheck_seconds * 1e3:>10.1f}"
                f"{r.ops_before:>12}{r.ops_after:>11}{r.primitive_functions:>10}"
            )
        lines.append(f"{'total':<28}{self.total_seconds * 1e3:>10.1f}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Pipeline:
    """An explicit list of passes run in order.

    `verify`: re-infer types after every pass (catches a pass that breaks typing, naming it).
    `dump_after`: pass names after which the IR text is captured (into `PipelineResult.dumps`,
    and handed to `dump(name, text)` when given).
    """

    passes: Sequence[Pass]
    verify: bool = True
    dump_after: Iterable[str] = ()
    dump: Callable[[str, str], None] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "passes", tuple(self.passes))
        object.__setattr__(self, "dump_after", frozenset(self.dump_after))
        for p in self.passes:
            if not isinstance(p, Pass):
                raise TypeError(f"Pipeline takes Pass values, got {type(p).__name__}: {p!r}")
        unknown = set(self.dump_after) - {p.name for p in self.passes}
        if unknown:
            raise ValueError(f"dump_after names passes not in the pipeline: {', '.join(sorted(unknown))}")

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.passes]

    def __call__(self, mod: IRModule, memo: PassMemo | None = None) -> IRModule:
        return self.run(mod, memo).module

    def run(self, mod: IRModule, memo: PassMemo | None = None) -> PipelineResult:
        """Run the passes on `mod`. With `memo`, start from the module its longest held prefix of
        these passes produced on `mod`, and hold each pass's result there (`PassMemo`); the
        records then cover the passes run. A pipeline that dumps IR, runs unverified or has a pass
        with unhashable options ignores the memo."""
        if memo is not None and (self.dump_after or not self.verify or not _hashable(self.passes)):
            memo = None
        return run_deep(self._run, mod, memo)

    def _run(self, mod: IRModule, memo: PassMemo | None) -> PipelineResult:
        records: list[PassRecord] = []
        dumps: dict[str, str] = {}
        source, passes = mod, tuple(self.passes)
        start, mod, typed = memo.resume(source, passes) if memo is not None else (0, mod, False)
        for i, p in enumerate(passes[start:], start):
            tc = 0.0
            if p.requires_types and not typed:
                t0 = time.perf_counter()
                mod = infer_module_types(mod, p.name, before=True)
                tc += time.perf_counter() - t0
            before = count_ops(mod)
            t0 = time.perf_counter()
            try:
                new = p.transform_module(mod)
            except PassError:
                raise
            except Exception as e:
                raise PassError(p.name, f"{type(e).__name__}: {e}") from e
            elapsed = time.perf_counter() - t0
            if not isinstance(new, IRModule):
                raise PassError(p.name, f"returned {type(new).__name__}, not an IRModule")
            mod, typed = new, False
            if self.verify:
                t0 = time.perf_counter()
                mod = infer_module_types(mod, p.name, before=False)
                tc += time.perf_counter() - t0
                typed = True
            records.append(PassRecord(p.name, elapsed, before, count_ops(mod), tc,
                                      len(primitive_functions(mod))))
            if memo is not None:
                memo.keep(source, passes[:i + 1], mod, typed)
            if p.name in self.dump_after:
                text = mod.astext()
                dumps[p.name] = text
                if self.dump is not None:
                    self.dump(p.name, text)
        return PipelineResult(mod, records, dumps)


def _hashable(passes: Sequence[Pass]) -> bool:
    try:
        hash(tuple(passes))
    except TypeError:
        return False
    return True
