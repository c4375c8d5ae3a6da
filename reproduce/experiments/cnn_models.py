"""What `cnn_comp` and `relay_opt` share: the vision models they measure, and tuning a model into the
log exactly as `autorelay tune` does (so the two experiments, and `autorelay compile`, reuse each
other's schedules).

A model is named as `search.models.load_model` names it ("resnet-18", or "resnet-18@64" at a reduced
image size): the log files tuning runs under that name, and the pipeline a run tuned with is looked
up by it, so both experiments must load models the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from reproduce.experiment import Context


@dataclass(frozen=True)
class CNN:
    """A zoo model at an image size (None: the architecture's own)."""

    zoo: str
    image_size: int | None = None

    @property
    def name(self) -> str:
        return self.zoo if self.image_size is None else f"{self.zoo}@{self.image_size}"

    @property
    def options(self) -> dict[str, Any]:
        """`zoo.get` keyword options (what the baseline factories take)."""
        return {} if self.image_size is None else {"image_size": self.image_size}

    def load(self) -> Any:
        """The `search.models.Model` (seeded random inputs), named as the log knows it."""
        from search.models import load_model

        return load_model(self.zoo, image_size=self.image_size)

    def as_params(self) -> dict[str, Any]:
        return {"zoo": self.zoo, "image_size": self.image_size}

    @staticmethod
    def from_params(params: Any) -> CNN:
        return CNN(params["zoo"], params["image_size"])


# The Relay paper's vision models (Sec. 5.2, Fig. 6), at their published input sizes.
SECONDS_PER_TRIAL = 0.8  # a tuning candidate's build and timing on a quiet 2-core machine (for the ETA)
FULL = (CNN("resnet-18"), CNN("mobilenet-v2"), CNN("vgg-16"), CNN("nature-dqn"), CNN("dcgan"))


def tuned_pipeline(ctx: Context, model: Any) -> tuple[str, str | None] | None:
    """(pipeline, layout plan as JSON or None) that the log's latest tuning run of `model` used on
    this target, as `autorelay compile` would build it; None: the log never tuned the model."""
    from search.pipeline_choice import PLAN, choose_pipeline, logged_pipeline

    logged = logged_pipeline(ctx.db, model, "llvm", ctx.threads)
    if logged != PLAN:
        return None if logged is None else (logged, None)
    choice = choose_pipeline(PLAN, model, ctx.db, "llvm", ctx.threads)
    return choice.pipeline, choice.plan.to_json() if choice.plan is not None else None


def tune(ctx: Context, model: Any, trials: int, pipeline: str) -> dict[str, Any]:
    """Tune `model` with `trials` measurements in all (logged ones count: a rerun resumes) into
    `ctx.db`, as `autorelay tune --trials N --pipeline P` does; returns what the report shows."""
    from search.model_tuning import Progress, tune_model

    class _Notes(Progress):
        def stage(self, text: str) -> None:
            ctx.note(f"{model.name}: {text}")

    res = tune_model(model, trials=trials, tuner="xgb", db=ctx.db, target="llvm", threads=ctx.threads,
                     pipeline=pipeline, seed=ctx.seed, progress=_Notes(), compare=not ctx.quick)
    if res.interrupted:
        raise KeyboardInterrupt
    return finite({"model": model.name,
                   "trials_budget": trials, "new_trials": res.new_trials,
            "trials_logged": sum(r.trials for r in res.rows), "tasks": len(res.rows),
            "pipeline": tuned_pipeline(ctx, model)[0], "pipeline_choice": res.pipeline, "tune_s": res.seconds,
            "e2e_default_ms": res.latency_before_s * 1e3, "e2e_tuned_ms": res.latency_after_s * 1e3,
            "e2e_speedup": res.speedup, "max_abs_diff": res.max_abs_diff,
            "task_speedups": {r.task.name: r.speedup for r in res.rows}})


def finite(value: Any) -> Any:
    """`value` with every NaN or infinity replaced by None: the log stores JSON without them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


__all__ = ["CNN", "FULL", "SECONDS_PER_TRIAL", "finite", "tune", "tuned_pipeline"]
