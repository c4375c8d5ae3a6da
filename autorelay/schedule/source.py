"""The schedule-source seam: how a compiler asks a tuning log (or anything else) for a config.

A source answers `lookup(workload_key, target, workload=description)` with a `Lookup`-shaped value:
`config` (a `Config`, its JSON dict, or None for "use the heuristic default"), `kind` — where the
answer came from (``exact``: tuned for this workload; ``transferred``: from the nearest tuned
workload; ``default``: nothing usable) — and `detail` (a note for the build report, e.g. that the
schedules were tuned for another thread count). A transferred answer may also carry
`donor_workload`, the donor's description: a config tuned at another batch is refused where its
template's batch knobs disagree with this workload's defaults (`Template.carries_across_batch`).
`target` is the canonical target string
(`str(Target)`), the name the log files measurements under. `tuning_db`'s `ScheduleSource` is one
such source; `autorelay.primitive.choose_schedule` is the one caller.

A source may also carry the pipeline a model was tuned with (`pipeline_for(model_key, target)`),
so a build from Python uses the pipeline `autorelay tune --pipeline auto` picked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from autorelay.schedule.space import Config

# The build report's word for each lookup kind.
SOURCE_NAMES = {"exact": "tuned", "transferred": "transferred", "default": "default"}


@dataclass(frozen=True)
class Lookup:
    """A source's answer for one workload (see the module docstring)."""

    config: Config | dict[str, Any] | None
    kind: str = "default"
    detail: str = ""


@runtime_checkable
class ScheduleSource(Protocol):
    def lookup(self, workload_key: str, target: str, *,
               workload: dict[str, Any] | None = None) -> Lookup:
        """The config for `workload_key` on `target` (see the module docstring)."""
        ...


@runtime_checkable
class PipelineSource(Protocol):
    def pipeline_for(self, model_key: str, target: str) -> str | None:
        """The pass pipeline the model with this key was tuned with on `target`, if logged."""
        ...


def as_config(found: Config | dict[str, Any] | None) -> Config | None:
    return found if isinstance(found, Config) or found is None else Config.from_json(found)


__all__ = ["SOURCE_NAMES", "Lookup", "PipelineSource", "ScheduleSource", "as_config"]
