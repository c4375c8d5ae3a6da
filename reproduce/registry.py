"""The experiments `autorelay reproduce` knows, in the order the issue lists them. Each lives in its
own module under `reproduce.experiments` and defines `EXPERIMENT`; importing one is cheap (heavy
imports happen when it measures)."""

from __future__ import annotations

import importlib

from .experiment import Experiment

MODULES = ("cnn_comp", "rnns", "relay_opt", "autotvm_curves", "transfer", "quantization", "vta", "gpu")


def _load(module: str) -> Experiment | None:
    try:
        mod = importlib.import_module(f"reproduce.experiments.{module}")
    except ModuleNotFoundError as e:
        if e.name == f"reproduce.experiments.{module}":
            return None  # not written yet in this checkout
        raise
    return mod.EXPERIMENT


def experiments() -> list[Experiment]:
    return [e for e in (_load(m) for m in MODULES) if e is not None]


def get(name: str) -> Experiment:
    for exp in experiments():
        if exp.name == name:
            return exp
    known = ", ".join(e.name for e in experiments())
    raise KeyError(f"no experiment {name!r}; known: {known} (autorelay reproduce --list)")


__all__ = ["MODULES", "experiments", "get"]
