"""The search engine: kernel tasks, measurement, cost model, tuners, the task scheduler, and the
model-level glue (`extract_tasks`, `tune_model`) behind `autorelay tune / compile / run`.

Exports are loaded lazily: `import search` must stay cheap (the CLI imports it for every
subcommand, and measurement workers import it in fresh processes).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    # model level
    "extract_tasks": "search.extract",
    "ModelTask": "search.extract",
    "BoundSource": "search.extract",
    "tune_model": "search.model_tuning",
    "ModelTuneResult": "search.model_tuning",
    "load_model": "search.models",
    "compile_model": "search.models",
    "run_model": "search.models",
    "search_precisions": "search.quantize_search",
    # kernel level (search core)
    "Task": "search.task",
    "kernel_task": "search.task",
    "tune_task": "search.tune",
    "tune_tasks": "search.tune",
    "TuneResult": "search.tune",
    "TaskScheduler": "search.scheduler",
    "make_tuner": "search.tuners",
    "TUNERS": "search.tuners",
    "Measurer": "search.measure",
    "MeasureInput": "search.measure",
    "MeasureResult": "search.measure",
    "ErrorKind": "search.measure",
    "TimingSettings": "search.measure",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'search' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = sorted(_EXPORTS)
