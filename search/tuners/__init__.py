"""Tuners: random, grid, genetic, model-based (XGBoost + annealing) and Optuna (TPE, CMA-ES)."""

from __future__ import annotations

from search.task import Task
from search.tuners.base import GridTuner, RandomTuner, Tuner
from search.tuners.genetic import GeneticTuner
from search.tuners.model_based import Featurizer, ModelBasedTuner
from search.tuners.optuna_tuner import OptunaTuner

TUNERS = ("random", "grid", "genetic", "xgb", "tpe", "cmaes")


def make_tuner(name: str, task: Task, seed: int = 0, **options: object) -> Tuner:
    """A tuner by name (the CLI's `--tuner`): one of TUNERS."""
    if name == "random":
        return RandomTuner(task, seed)
    if name == "grid":
        return GridTuner(task, seed)
    if name in ("genetic", "ga"):
        return GeneticTuner(task, seed)
    if name in ("xgb", "model"):
        return ModelBasedTuner(task, seed, **options)  # type: ignore[arg-type]
    if name in ("tpe", "cmaes"):
        return OptunaTuner(task, seed, sampler=name, **options)  # type: ignore[arg-type]
    raise ValueError(f"unknown tuner {name!r} (known: {', '.join(TUNERS)})")


__all__ = ["TUNERS", "Featurizer", "GeneticTuner", "GridTuner", "ModelBasedTuner", "OptunaTuner",
           "RandomTuner", "Tuner", "make_tuner"]
