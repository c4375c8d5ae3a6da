"""Moves in a knob space, on integer config indices.

A config's index decodes to one value position per knob (mixed radix, first knob most
significant, as `Space.get` does). Tuners walk the space in these coordinates: a neighbour
changes one knob by one position (knob values are ordered, e.g. tile sizes), a mutation resets one
knob to any other value.
"""

from __future__ import annotations

import random

from autorelay.schedule.space import Space


def radices(space: Space) -> list[int]:
    return [len(k.values) for k in space.knobs]


def knob_indices(space: Space, index: int) -> list[int]:
    """Value position of each knob for config `index`."""
    if not 0 <= index < space.size:
        raise IndexError(f"config index {index} out of range for a space of {space.size}")
    out = []
    for r in reversed(radices(space)):
        index, d = divmod(index, r)
        out.append(d)
    return out[::-1]


def from_knob_indices(space: Space, digits: list[int]) -> int:
    rs = radices(space)
    if len(digits) != len(rs):
        raise ValueError(f"expected {len(rs)} knob positions, got {len(digits)}")
    index = 0
    for d, r in zip(digits, rs):
        if not 0 <= d < r:
            raise ValueError(f"knob position {d} out of range 0..{r - 1}")
        index = index * r + d
    return index


def neighbours(space: Space, index: int) -> list[int]:
    """Configs that differ from `index` in one knob by one value position."""
    digits = knob_indices(space, index)
    out = []
    for k, r in enumerate(radices(space)):
        for step in (-1, 1):
            d = digits[k] + step
            if 0 <= d < r:
                nd = list(digits)
                nd[k] = d
                out.append(from_knob_indices(space, nd))
    return out


def mutate(space: Space, index: int, rng: random.Random, knobs: int = 1) -> int:
    """Reset `knobs` randomly chosen knobs (with more than one value) to other values."""
    digits = knob_indices(space, index)
    free = [k for k, r in enumerate(radices(space)) if r > 1]
    if not free:
        return index
    for k in rng.sample(free, min(knobs, len(free))):
        r = len(space.knobs[k].values)
        digits[k] = (digits[k] + rng.randrange(1, r)) % r
    return from_knob_indices(space, digits)


def random_move(space: Space, index: int, rng: random.Random) -> int:
    """A local move for annealing: mostly a neighbour, sometimes a one-knob jump."""
    if rng.random() < 0.7:
        nb = neighbours(space, index)
        if nb:
            return rng.choice(nb)
    return mutate(space, index, rng)


def crossover(space: Space, a: int, b: int, rng: random.Random) -> int:
    """Each knob from one parent or the other."""
    da, db = knob_indices(space, a), knob_indices(space, b)
    return from_knob_indices(space, [x if rng.random() < 0.5 else y for x, y in zip(da, db)])
