"""Lowering: a fused primitive function becomes one tensor compute DAG (`lower_primitive`), named
for the tuning log by `workload_key` / `describe_workload`."""

from autorelay.lower.lower import (
           InputSource,
           LoweredFunction,
           NoCompute,
           inline_stages,
           lower,
           lower_primitive,
)
from autorelay.lower.relayout import packed_shape, relayout_compute
from autorelay.lower.workload import describe_workload, workload_key

__all__ = ["InputSource", "LoweredFunction", "NoCompute", "describe_workload", "inline_stages", "lower",
           "lower_primitive", "packed_shape", "relayout_compute", "workload_key"]
