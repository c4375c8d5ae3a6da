"""Immutable operator attributes (`padding=[1, 1], channels=64`).

Values are normalised to hashable forms (lists become tuples, numpy scalars become Python
scalars) so that calls can be hashed structurally and attributes can be compared.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np


def freeze_value(v: Any) -> Any:
    """Turn a user-supplied attribute value into an immutable, hashable one."""
    if isinstance(v, list | tuple):
        return tuple(freeze_value(x) for x in v)
    if isinstance(v, np.ndarray):
        return tuple(freeze_value(x) for x in v.tolist())
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, dict | Attrs):
        return Attrs(v)
    return v


class Attrs(Mapping[str, Any]):
    """A frozen, ordered mapping of attribute names to hashable values."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, Any] | None = None, /, **kw: Any) -> None:
        merged = dict(items or {})
        merged.update(kw)
        object.__setattr__(self, "_items", tuple((k, freeze_value(v)) for k, v in merged.items()))
        object.__setattr__(self, "_hash", None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Attrs is immutable")

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(tuple(sorted(self._items, key=lambda kv: kv[0]))))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return dict(self._items) == dict(other.items())

    def __repr__(self) -> str:
        return "Attrs(" + ", ".join(f"{k}={v!r}" for k, v in self._items) + ")"

    def replace(self, **changes: Any) -> Attrs:
        d = dict(self._items)
        d.update(changes)
        return Attrs(d)

    def to_json(self) -> dict[str, Any]:
        def thaw(v: Any) -> Any:
            if isinstance(v, tuple):
                return [thaw(x) for x in v]
            if isinstance(v, Attrs):
                return v.to_json()
            return v

        return {k: thaw(v) for k, v in self._items}


EMPTY_ATTRS = Attrs()
