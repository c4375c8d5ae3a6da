"""The graph-level choice of a model's pass pipeline (`--pipeline auto`).

The pipelines differ in how the whole graph is laid out: `default` keeps convolutions in NCHW
(Winograd where it pays), `nchwc` packs the remaining ones in channel blocks of 8 and, on targets
whose vectors hold 16 floats, `nchwc16` in blocks of 16. Which is faster
depends on the model — depthwise and 1x1 convolutions (MobileNet) gain from channel blocks, a
Winograd ResNet loses to the layout transforms around its Winograd kernels — so it is measured,
not guessed: both are built with default schedules and timed interleaved, and the fastest wins.

The pick is a property of the tuning log, not of one command: `tune_model` records the pipeline
it tuned with in its run, and a later `auto` for the same model and target (a resumed tune, a
compile, a benchmark) reuses that pipeline, so the build finds the schedules the tuner logged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autorelay.codegen import resolve_target
from search.models import (
    Model,
    PreparedModel,
    build_model,
    prepare_model,
    run_inputs,
    time_interleaved,
    tuning_target,
)
from tuning_db.schema import canonical_target

AUTO = "auto"
CANDIDATES = ("default", "nchwc")


def candidates(target: str, threads: int | None) -> tuple[str, ...]:
    """The pipelines `auto` measures on `target`: NCHW, NCHW8c, and NCHW16c where a vector holds 16
    floats (AVX-512), since the channel block that fills one vector is not known to win in advance."""
    wide = resolve_target(target, threads).vector_lanes() >= 16
    return (*CANDIDATES, "nchwc16") if wide else CANDIDATES


@dataclass
class PipelineChoice:
    pipeline: str
    how: str  # "given" (named by the user), "logged" (an earlier run's pick), "measured"
    latencies: dict[str, float] = field(default_factory=dict)  # seconds per candidate, when measured
    exe: Any = None  # the measured winner's default-schedule build, when asked to keep it
    prepared: PreparedModel | None = None  # the measured winner's prepared module (reused by tune)

    def describe(self) -> str:
        if self.how != "measured":
            return f"pipeline {self.pipeline} ({self.how})"
        times = ", ".join(f"{p} {s * 1e3:.2f} ms" for p, s in self.latencies.items())
        return f"pipeline {self.pipeline} (measured with default schedules: {times})"


def logged_pipeline(db: Any, model: Model, target: str, threads: int | None) -> str | None:
    """The pipeline of the latest tuning run of this model for this target in the log, if any."""
    want = tuning_target(target, threads)
    for run in reversed(db.runs()):
        info = run.info or {}
        same_target = canonical_target(str(info.get("target", ""))) == want
        if run.model == model.name and same_target and isinstance(info.get("pipeline"), str):
            return info["pipeline"]
    return None


def measure_pipelines(model: Model, target: str, threads: int | None,
                      pipelines: tuple[str, ...] | None = None, keep_build: bool = False) -> PipelineChoice:
    """Build `model` with each candidate pipeline and default schedules; the fastest, timed
    interleaved (candidates that build the same kernels still cost one build each). A candidate
    that does not build for this model drops out; when none builds, the first one's error is raised.
    `keep_build`: the choice keeps the winner's build, for a caller that wants exactly that build."""
    from autorelay.errors import AutoRelayError

    built, prepared, errors = [], {}, []
    for p in pipelines or candidates(target, threads):
        try:
            prepared[p] = prepare_model(model, target, threads=threads, pipeline=p)
            built.append((p, build_model(model, None, target, threads=threads, pipeline=p,
                                         prepared=prepared[p])))
        except AutoRelayError as e:
            errors.append(e)
    if not built:
        raise errors[0]
    times = time_interleaved([exe for _, exe in built], run_inputs(built[0][1], model), rounds=9)
    latencies = {p: t for (p, _), t in zip(built, times)}
    best = min(latencies, key=latencies.__getitem__)
    return PipelineChoice(best, "measured", latencies, dict(built)[best] if keep_build else None,
                          prepared[best])


def choose_pipeline(pipeline: str, model: Model, db: Any, target: str, threads: int | None,
                    keep_build: bool = False) -> PipelineChoice:
    """Resolve `pipeline`: a name stands for itself; `auto` is the log's pick for this model
    (`db` may be None: no log) or, when there is none, the measured fastest candidate (with its
    default-schedule build when `keep_build`)."""
    if pipeline != AUTO:
        return PipelineChoice(pipeline, "given")
    logged = logged_pipeline(db, model, target, threads) if db is not None else None
    if logged is not None:
        return PipelineChoice(logged, "logged")
    return measure_pipelines(model, target, threads, keep_build=keep_build)


__all__ = ["AUTO", "CANDIDATES", "PipelineChoice", "candidates", "choose_pipeline", "logged_pipeline",
           "measure_pipelines"]
