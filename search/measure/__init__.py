"""Measuring candidates: typed inputs/results, reusable crash-proof workers, builder and runner."""

from search.measure.jobs import FaultHook, TimingSettings
from search.measure.local import LocalBuilder, LocalRunner, Measurer
from search.measure.result import BuildResult, ErrorKind, MeasureInput, MeasureResult

__all__ = ["BuildResult", "ErrorKind", "FaultHook", "LocalBuilder", "LocalRunner", "MeasureInput",
           "MeasureResult", "Measurer", "TimingSettings"]
