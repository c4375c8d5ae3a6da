"""An executable for a model with dynamic input shapes: one static build per concrete shape.

The graph executor plans memory for static shapes, so a model with a symbolic batch or sequence
length is compiled on first sight of each concrete input shape (`autorelay.build` with `shapes=`)
and the build is cached: after the first call per shape it runs at the speed of the static build.
At most `max_builds` shapes are kept (least recently used goes first); `shapes_built` and the
report say which shapes exist and how many builds were evicted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from autorelay.errors import AutoRelayError


class SpecializingExecutable:
    """Callable like an `Executable`; compiles per input shape (see the module docstring)."""

    def __init__(self, build_for: Callable[[dict[str, tuple[int, ...]]], Any], input_names: Sequence[str],
                 dynamic: Sequence[str], max_builds: int = 8) -> None:
        if max_builds < 1:
            raise ValueError(f"max_builds must be >= 1, got {max_builds}")
        self._build_for, self.input_names = build_for, list(input_names)
        self.dynamic, self.max_builds = list(dynamic), max_builds
        self._builds: OrderedDict[tuple[tuple[int, ...], ...], Any] = OrderedDict()
        self.builds = 0  # compilations so far (a shape evicted and seen again compiles again)
        self.evicted = 0
        self._last: Any = None

    @property
    def shapes_built(self) -> list[dict[str, tuple[int, ...]]]:
        return [dict(zip(self.input_names, key)) for key in self._builds]

    def executable_for(self, *inputs: Any) -> Any:
        """The static build for these inputs' shapes (compiled now if it is the first call)."""
        if len(inputs) != len(self.input_names):
            raise AutoRelayError(f"expected {len(self.input_names)} input(s) "
                                 f"({', '.join(self.input_names)}), got {len(inputs)}")
        key = tuple(tuple(int(d) for d in np.shape(a)) for a in inputs)
        exe = self._builds.get(key)
        if exe is None:
            exe = self._build_for(dict(zip(self.input_names, key)))
            self.builds += 1
            self._builds[key] = exe
            if len(self._builds) > self.max_builds:
                self._builds.popitem(last=False)
                self.evicted += 1
        else:
            self._builds.move_to_end(key)
        self._last = exe
        return exe

    def __call__(self, *inputs: Any) -> Any:
        return self.executable_for(*inputs)(*inputs)

    def run(self, **named: Any) -> Any:
        missing = [n for n in self.input_names if n not in named]
        if missing:
            raise AutoRelayError(f"inputs: missing {', '.join(missing)} "
                                 f"(expected {', '.join(self.input_names)})")
        return self(*[named[n] for n in self.input_names])

    def save(self, path: Any) -> None:
        """Refused with the way out: a saved executable is one static build, and this one compiles
        a build per input shape on demand."""
        raise AutoRelayError(f"cannot save to {path}: the model has dynamic input(s) "
                             f"({', '.join(self.dynamic)}), compiled per input shape on first call; "
                             f"build it for fixed shapes (autorelay.build(..., shapes={{name: shape}}) or "
                             f"`autorelay compile --batch N`) and save that")

    def profile(self, *inputs: Any, repeat: int = 10) -> Any:
        return self.executable_for(*inputs).profile(*inputs, repeat=repeat)

    @property
    def report(self) -> Any:
        """The report of the most recently used build, preceded by the shapes compiled so far."""
        if self._last is None:
            return (f"dynamic input(s) {', '.join(self.dynamic)}: nothing compiled yet (a build per "
                    f"input shape, on first call)")
        shapes = "; ".join(", ".join(f"{k}{list(v)}" for k, v in s.items()) for s in self.shapes_built)
        return (f"specialised per input shape: {self.builds} build(s), {self.evicted} evicted "
                f"(keeps {self.max_builds}); cached: {shapes}\n{self._last.report}")


__all__ = ["SpecializingExecutable"]
