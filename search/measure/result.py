"""What a measurement is: typed inputs and results, and the kinds of failure a candidate can have.

AutoTVM's `MeasureInput` / `MeasureResult` / `MeasureErrorNo` split, as frozen values: tuners,
the tuning log and tests all speak these types, and every failure is a typed result rather than an
exception, so one bad candidate never stops a tuner.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from autorelay.schedule.space import Config


class ErrorKind(enum.Enum):
    NONE = "none"
    COMPILE_ERROR = "compile_error"
    ILLEGAL_SCHEDULE = "illegal_schedule"
    RUNTIME_CRASH = "runtime_crash"
    TIMEOUT = "timeout"
    WRONG_ANSWER = "wrong_answer"


@dataclass(frozen=True)
class MeasureInput:
    """One candidate: the config and its integer index in the task's space (-1 when outside it)."""

    config: Config
    index: int = -1


@dataclass(frozen=True)
class BuildResult:
    """What a builder worker reports: failure kind (or NONE), compile seconds, loop-IR features and
    the emitted code the runner loads (`autorelay.kernel.KernelCode`)."""

    error: ErrorKind
    message: str = ""
    build_s: float = 0.0
    features: tuple[float, ...] = ()
    code: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class MeasureResult:
    """Seconds per kernel call, one per repeat (empty on failure), and how the candidate fared."""

    costs: tuple[float, ...]
    error: ErrorKind = ErrorKind.NONE
    message: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is ErrorKind.NONE and bool(self.costs)

    @property
    def mean(self) -> float:
        """Mean cost (inf for a failure)."""
        return sum(self.costs) / len(self.costs) if self.ok else math.inf

    @property
    def median(self) -> float:
        """Median cost (inf for a failure): what tuners minimise, robust to one noisy repeat."""
        if not self.ok:
            return math.inf
        s = sorted(self.costs)
        n = len(s)
        return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])

    @staticmethod
    def failed(kind: ErrorKind, message: str, build_s: float = 0.0, run_s: float = 0.0) -> MeasureResult:
        return MeasureResult((), kind, message[:2000], build_s, run_s)
