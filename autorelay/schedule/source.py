"""How a compiler asks a schedule source for a workload's config — one rule for the graph build,
the VM and the AoT compiler.

A source is any object with `lookup(workload_key, target, workload=...)` returning a config (a
`Config` or its JSON form) or None; it may say where the answer came from in `last_lookup_kind`
("exact", "transferred", "default"), which becomes the kernel's reported source.
"""

from __future__ import annotations

from typing import Any

from autorelay.schedule.space import Config

SOURCE_NAMES = {"exact": "tuned", "transferred": "transferred", "default": "default"}


def lookup_schedule(schedules: Any, key: str, target_name: str,
                    workload: dict[str, Any] | None) -> tuple[Config | None, str]:
    """(config or None for the heuristic default, reported source) for one workload."""
    if schedules is None:
        return None, "default"
    try:
        found = schedules.lookup(key, target_name, workload=workload)
    except TypeError:  # a plain lookup object without the `workload` keyword
        found = schedules.lookup(key, target_name)
    if found is None:
        return None, "default"
    kind = getattr(schedules, "last_lookup_kind", None)
    source = SOURCE_NAMES.get(str(kind), "tuned") if kind is not None else "tuned"
    return (found if isinstance(found, Config) else Config.from_json(found)), source
