"""Modules after the first passes of pipelines run on one input, so that pipelines beginning with
the same passes run them once.

A search prepares one model many times: every named float pipeline and every layout plan begins
with the same ten graph optimisations, and a plan's fusion variants differ in their last pass
(FuseOps) only. Passes are frozen dataclasses compared by value, so a pipeline can resume from the
module that an earlier pipeline's equal first passes produced. On MobileNet-v2 (2-core Zen 3) the
layout search's graph preparation was about a third of its time, and most of that was re-running
(and re-typing, the pipeline re-infers types after every pass) the same passes.

`PassMemo` holds those modules for whoever owns it (a search keeps one per model): it is an
explicit object, never process state. Sources are keyed by the identity of what they were made
from and results by the identity of the module the passes ran on; each entry keeps those objects
alive (and a result's entry is checked against its module), so a reused identity cannot match.
Entries are dropped least recently used first beyond `most`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from autorelay.ir.module import IRModule

# (id of the module the passes ran on, the passes) -> (that module, the module after them, typed?)
_Key = tuple[int, tuple[Any, ...]]


class PassMemo:
    """Pipeline prefixes' results on a few source modules (see the module docstring)."""

    def __init__(self, most: int = 64) -> None:
        self.most = most
        self._sources: OrderedDict[tuple[Hashable, ...], tuple[IRModule, tuple[Any, ...]]] = OrderedDict()
        self._after: OrderedDict[_Key, tuple[IRModule, IRModule, bool]] = OrderedDict()
        self.hits = 0  # passes not run because an entry held their result

    def source(self, made_from: Sequence[Any], make: Callable[[], IRModule]) -> IRModule:
        """The module `make()` builds from the objects `made_from` (by identity: a model's IR and
        its weights), built once while cached."""
        key = tuple(id(x) for x in made_from)
        got = self._sources.get(key)
        if got is None:
            got = self._sources[key] = (make(), tuple(made_from))  # pins the identities
            self._trim(self._sources)
        self._sources.move_to_end(key)
        return got[0]

    def resume(self, mod: IRModule, passes: Sequence[Any]) -> tuple[int, IRModule, bool]:
        """(k, the module after `passes[:k]` on `mod`, whether it is typed) for the longest such
        prefix held; (0, mod, False) when none is."""
        for k in range(len(passes), 0, -1):
            key = (id(mod), tuple(passes[:k]))
            got = self._after.get(key)
            if got is not None and got[0] is mod:
                self._after.move_to_end(key)
                self.hits += k
                return k, got[1], got[2]
        return 0, mod, False

    def keep(self, mod: IRModule, passes: Sequence[Any], out: IRModule, typed: bool) -> None:
        """Hold `out`, the module after `passes` on `mod`."""
        self._after[(id(mod), tuple(passes))] = (mod, out, typed)
        self._trim(self._after)

    def _trim(self, entries: OrderedDict) -> None:
        while len(entries) > self.most:
            entries.popitem(last=False)

    def __getstate__(self) -> dict[str, Any]:
        """A copy sent to another process starts empty: the modules are large and ids local."""
        return {"most": self.most}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["most"])  # type: ignore[misc]

    def __len__(self) -> int:
        return len(self._after)


__all__ = ["PassMemo"]
