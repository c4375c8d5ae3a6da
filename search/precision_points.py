"""The points of the precision search (`search.quantize_search`): one measured plan, the Pareto
front of a set of them, and the two accuracy scores a point carries (top-1 against labels, or the
relative error of the outputs against the fp32 model's)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PlanPoint:
    """One measured plan: the precision of every quantizable layer and what it measured to."""

    plan: Mapping[str, str]  # layer -> "int8" | "bf16" | "fp32", every quantizable layer named
    latency_ms: float  # median of the interleaved timing rounds
    spread_ms: tuple[float, float]  # (10th, 90th) percentile of the rounds
    fp32_latency_ms: float  # the fp32 build in the same rounds
    accuracy: float  # top-1 (fraction) or relative output error
    drop: float  # accuracy lost against fp32 (top-1 points as a fraction, or the relative error)
    stage: str  # "sensitivity", "seed" or "search": who proposed it first

    @property
    def relative(self) -> float:
        """Its latency over fp32's in the same interleaved rounds: plans are ranked by this, not by
        their own medians, which come from different rounds and drift with the host's load."""
        return self.latency_ms / self.fp32_latency_ms

    @property
    def int8_layers(self) -> list[str]:
        return [n for n, p in self.plan.items() if p == "int8"]

    def summary(self) -> str:
        """`int8 all`, `fp32 all`, or the minority precision's layers (with bf16 in the plan: the
        count of each precision and the bf16 layers)."""
        int8, n = self.int8_layers, len(self.plan)
        bf16 = [x for x, p in self.plan.items() if p == "bf16"]
        if bf16:
            fp32 = n - len(int8) - len(bf16)
            return f"int8 {len(int8)}/{n}, fp32 {fp32}/{n}, bf16: " + ", ".join(bf16)
        if len(int8) == n:
            return "int8 all"
        if not int8:
            return "fp32 all"
        if len(int8) * 2 <= n:
            return f"int8 {len(int8)}/{n}: " + ", ".join(int8)
        return f"int8 {len(int8)}/{n}, fp32: " + ", ".join(x for x in self.plan if x not in int8)


def plan_key(plan: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(plan.items())))


def pareto_front(points: Sequence[PlanPoint]) -> list[PlanPoint]:
    """The points no other point beats on both latency (`PlanPoint.relative`) and drop (ties kept
    once), fastest first."""
    front = []
    for p in points:
        dominated = any(q.relative <= p.relative and q.drop <= p.drop
                        and (q.relative < p.relative or q.drop < p.drop) for q in points)
        if not dominated and all(plan_key(p.plan) != plan_key(f.plan) for f in front):
            front.append(p)
    return sorted(front, key=lambda p: (p.relative, p.drop))


def top1(outputs: Sequence[np.ndarray], labels: np.ndarray) -> float:
    """Share of samples whose largest output is the label's class (a label the outputs have no
    class for is refused: it would make every plan score zero, and the search meaningless)."""
    rows = [o.reshape(o.shape[0], -1) for o in outputs]
    classes = min(r.shape[1] for r in rows)
    stray = labels[(labels < 0) | (labels >= classes)]
    if stray.size:
        raise ValueError(f"labels.npy holds class {int(stray[0])}, but the model's output has {classes} "
                         f"classes (0 to {classes - 1})")
    pred = np.concatenate([r.argmax(axis=1) for r in rows])
    return float(np.mean(pred == labels))


def relative_error(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    """||y - y_fp32|| / ||y_fp32|| over the whole validation set."""
    y = np.concatenate([o.ravel() for o in outputs])
    ref = np.concatenate([r.ravel() for r in reference])
    norm = float(np.linalg.norm(ref))
    return float(np.linalg.norm(y - ref)) / (norm if norm > 0 else 1.0)


__all__ = ["PlanPoint", "pareto_front", "plan_key", "relative_error", "top1"]
