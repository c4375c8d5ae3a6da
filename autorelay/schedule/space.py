"""Knobs, spaces and configs. A `Space` is the set of choices a template offers for one workload;
a `Config` is one point in it. They are different types on purpose (a point is not a space).

Configs are addressable by an integer (mixed radix over the knobs, first knob most significant),
which gives tuners cheap deduplication, random walks and integer parameters; they serialise to
JSON and back exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, (list, tuple)) else v


def _thaw(v: Any) -> Any:
    return [_thaw(x) for x in v] if isinstance(v, tuple) else v


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"knob {self.name} has no values")
        object.__setattr__(self, "values", tuple(_freeze(v) for v in self.values))


@dataclass(frozen=True)
class Config:
    """One choice per knob of `template`, as (name, value) pairs in knob order."""

    template: str
    values: tuple[tuple[str, Any], ...]

    def __getitem__(self, name: str) -> Any:
        for k, v in self.values:
            if k == name:
                return v
        raise KeyError(f"config of {self.template} has no knob {name!r}")

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def to_json(self) -> dict[str, Any]:
        return {"template": self.template, "knobs": {k: _thaw(v) for k, v in self.values}}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Config:
        return Config(d["template"], tuple((k, _freeze(v)) for k, v in d["knobs"].items()))


@dataclass(frozen=True)
class Space:
    template: str
    knobs: tuple[Knob, ...]

    @property
    def size(self) -> int:
        n = 1
        for k in self.knobs:
            n *= len(k.values)
        return n

    def __len__(self) -> int:
        return self.size

    def get(self, index: int) -> Config:
        if not 0 <= index < self.size:
            raise IndexError(f"config index {index} out of range for a space of {self.size}")
        vals = []
        for k in reversed(self.knobs):
            index, r = divmod(index, len(k.values))
            vals.append((k.name, k.values[r]))
        return Config(self.template, tuple(reversed(vals)))

    def index(self, config: Config) -> int:
        if config.template != self.template:
            raise ValueError(f"config of {config.template} is not in the {self.template} space")
        idx = 0
        for k in self.knobs:
            v = _freeze(config[k.name])
            if v not in k.values:
                raise ValueError(f"knob {k.name}: {v!r} is not one of {k.values}")
            idx = idx * len(k.values) + k.values.index(v)
        return idx

    def sample(self, rng: random.Random) -> Config:
        return self.get(rng.randrange(self.size))

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)


def divisors(n: int, limit: int | None = None) -> list[int]:
    return [d for d in range(1, (limit or n) + 1) if n % d == 0]


def candidates(n: int, prefer: list[int]) -> list[int]:
    """Tile sizes for an extent of `n`: the preferred ones (ragged allowed) plus small divisors."""
    out = {p for p in prefer if p <= max(n, 1) or p == prefer[0]}
    out |= {d for d in divisors(n) if d <= max(prefer)}
    return sorted(out)
