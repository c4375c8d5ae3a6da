"""The learned cost model: XGBoost ranking candidates by predicted speed.

A tuner only needs the *order* of candidates, and absolute run times differ by orders of magnitude
between workloads, so the model is trained with `rank:pairwise` on per-group relevance labels
(throughput relative to the group's best; failures get 0), one group per workload. Earlier
measurements of similar workloads from the tuning log enter as extra groups (transfer learning):
their configs are re-lowered on the *current* workload, so their features describe what those
schedules would do here, and their labels keep their own ranking.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np


class CostModel(Protocol):
    def fit(self, features: Sequence[Sequence[float]], costs: Sequence[float]) -> None: ...

    def predict(self, features: Sequence[Sequence[float]]) -> np.ndarray: ...


def relevance(costs: Sequence[float]) -> np.ndarray:
    """Throughput relative to the best (1.0), failures (inf/nan) 0: the ranking labels."""
    c = np.asarray(costs, dtype=np.float64)
    ok = np.isfinite(c) & (c > 0)
    if not ok.any():
        return np.zeros(len(c))
    best = c[ok].min()
    out = np.zeros(len(c))
    out[ok] = best / c[ok]
    return out


class XGBoostCostModel:
    """`fit` on this task's measurements (refit from scratch after each batch: cheap at these sizes);
    `add_transfer` adds a donor workload's measurements as a separate ranking group."""

    def __init__(self, rounds: int = 60, max_depth: int = 6, eta: float = 0.2, seed: int = 0,
                 threads: int = 1) -> None:
        self.rounds = rounds
        self.params = {
            "objective": "rank:pairwise", "eta": eta, "max_depth": max_depth, "min_child_weight": 1.0,
            "subsample": 1.0, "lambda": 1.0, "alpha": 0.0, "seed": seed, "nthread": threads,
            "verbosity": 0, "tree_method": "hist",
        }
        self._donors: list[tuple[np.ndarray, np.ndarray]] = []
        self._booster = None
        self.trained_on = 0

    @property
    def ready(self) -> bool:
        return self._booster is not None

    def add_transfer(self, features: Sequence[Sequence[float]], costs: Sequence[float]) -> None:
        x = np.asarray(features, dtype=np.float32)
        y = relevance(costs)
        if len(x) >= 2 and np.ptp(y) > 0:
            self._donors.append((x, y))

    def fit(self, features: Sequence[Sequence[float]], costs: Sequence[float]) -> None:
        import xgboost as xgb

        groups = list(self._donors)
        if len(features) >= 2:
            y = relevance(costs)
            if np.ptp(y) > 0:
                groups.append((np.asarray(features, dtype=np.float32), y))
        if not groups:
            return
        x = np.concatenate([g[0] for g in groups])
        y = np.concatenate([g[1] for g in groups])
        qid = np.concatenate([np.full(len(g[0]), i, dtype=np.int64) for i, g in enumerate(groups)])
        dtrain = xgb.DMatrix(x, label=y, qid=qid)
        self._booster = xgb.train(self.params, dtrain, num_boost_round=self.rounds)
        self.trained_on = len(x)

    def predict(self, features: Sequence[Sequence[float]]) -> np.ndarray:
        """Scores, higher = predicted faster (only their order means anything)."""
        x = np.asarray(features, dtype=np.float32)
        if self._booster is None or len(x) == 0:
            return np.zeros(len(x))
        return np.asarray(self._booster.inplace_predict(x))


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Rank correlation, used by tests and diagnostics to judge a model's ordering."""
    ra = np.argsort(np.argsort(np.asarray(a)))
    rb = np.argsort(np.argsort(np.asarray(b)))
    if len(ra) < 2:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])
