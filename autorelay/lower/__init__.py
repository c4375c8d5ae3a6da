"""Lowering: a fused primitive function becomes one tensor compute DAG (`lower_primitive`), named
for the tuning log by `workload_key` / `describe_workload` (`compute_key` for a bare compute)."""

from autorelay.lower.lower import (
           InputSource,
           LoweredFunction,
           NoCompute,
           inline_stages,
           lower,
           lower_primitive,
)
from autorelay.lower.relayout import relayout_compute
from autorelay.lower.workload import describe_workload, model_key, workload_key
from autorelay.schedule.relayout import packed_shape

__all__ = ["InputSource", "LoweredFunction", "NoCompute", "describe_workload", "inline_stages", "lower",
           "lower_primitive", "model_key", "packed_shape", "relayout_compute", "workload_key"]
