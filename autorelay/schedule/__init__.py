"""Schedules: frozen Steps, `apply(compute, steps) -> loop IR`, knob spaces and templates."""

from autorelay.schedule.apply import apply
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.steps import (
    Bind,
    CacheRead,
    CacheWrite,
    ComputeAt,
    ComputeInline,
    CrossThreadReduce,
    Fuse,
    ImplicitGemm,
    Pack,
    Pad,
    Parallel,
    Reorder,
    Split,
    Step,
    Unroll,
    Vectorize,
    from_json,
    to_json,
)

__all__ = [
    "Bind",
    "CacheRead",
    "CacheWrite",
    "ComputeAt",
    "ComputeInline",
    "Config",
    "CrossThreadReduce",
    "Fuse",
    "ImplicitGemm",
    "Knob",
    "Pack",
    "Pad",
    "Parallel",
    "Reorder",
    "Space",
    "Split",
    "Step",
    "Unroll",
    "Vectorize",
    "apply",
    "from_json",
    "to_json",
]
