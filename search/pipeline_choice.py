"""The graph-level choice of a model's pass pipeline (`--pipeline auto`).

The pipelines differ in how the whole graph is laid out: `default` keeps convolutions in NCHW
(Winograd where it pays), `nchwc` packs the remaining ones in channel blocks of 8 and, on targets
whose vectors hold 16 floats, `nchwc16` in blocks of 16. Which is faster
depends on the model — depthwise and 1x1 convolutions (MobileNet) gain from channel blocks, a
Winograd ResNet loses to the layout transforms around its Winograd kernels — so it is measured,
not guessed: both are built with default schedules and timed interleaved, and the fastest wins.

`plan` is the per-layer choice (`search.layout_search`, run by `autorelay tune --pipeline plan`):
the log's latest layout plan of the model on the target, rebuilt exactly; a plan the model no
longer matches (it names a layer the model lacks) is reported and the per-model choice is made
instead, as when no plan is stored.

The pick is a property of the tuning log, not of one command: `tune_model` records the pipeline
it tuned with in its run, and a later `auto` for the same model and target (a resumed tune, a
compile, a benchmark) reuses that pipeline, so the build finds the schedules the tuner logged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autorelay.codegen import resolve_target
from autorelay.lower import model_key
from autorelay.transform.layout_plan import LayoutPlan, conv_layers, plan_pipeline
from autorelay.transform.pipelines import default_pipeline
from search.models import (
    Model,
    PreparedModel,
    build_model,
    prepare_model,
    run_inputs,
    time_interleaved,
    tuning_target,
)

AUTO = "auto"
PLAN = "plan"
CANDIDATES = ("default", "nchwc")


def candidates(target: str, threads: int | None) -> tuple[str, ...]:
    """The pipelines `auto` measures on `target`: NCHW, NCHW8c, and NCHW16c where a vector holds 16
    floats (AVX-512), since the channel block that fills one vector is not known to win in advance;
    and the widest block with every convolution direct (no Winograd), since whether Winograd's
    kernels and the layout transforms around them beat a direct blocked kernel depends on the
    model and the machine. GPU targets have one: `gpu` (direct NCHW convolutions, which the GPU
    templates tile)."""
    tgt = resolve_target(target, threads)
    if tgt.kind == "cuda":
        return (default_pipeline(tgt.kind),)
    if tgt.vector_lanes() >= 16:
        return (*CANDIDATES, "nchwc16", "nchwc16-direct")
    return (*CANDIDATES, "nchwc-direct")


@dataclass
class PipelineChoice:
    pipeline: str
    how: str  # "given" (named by the user), "logged" (an earlier run's pick), "measured"
    latencies: dict[str, float] = field(default_factory=dict)  # seconds per candidate, when measured
    exe: Any = None  # the measured winner's default-schedule build, when asked to keep it
    prepared: PreparedModel | None = None  # the measured winner's prepared module (reused by tune)
    plan: LayoutPlan | None = None  # pipeline "plan": the per-layer layout plan it builds
    note: str = ""  # a warning for the user: why a stored plan was not used, which candidates failed

    def describe(self) -> str:
        note = f"; {self.note}" if self.note else ""
        if self.how != "measured":
            return f"pipeline {self.pipeline} ({self.how}){note}"
        times = ", ".join(f"{p} {s * 1e3:.2f} ms" for p, s in self.latencies.items())
        return f"pipeline {self.pipeline} (measured with default schedules: {times}){note}"


def logged_pipeline(db: Any, model: Model, target: str, threads: int | None) -> str | None:
    """The pipeline of the latest tuning run of this model for this target in the log, if any. A
    run is this model's when it logged this model's key (the structure and shapes: the same network
    under another name, `resnet-18:b8` tuned and `resnet-18` at batch 8 benchmarked, is found); a run
    from before keys were logged, by its name. Unlike a build's schedule source (`pipeline_for`),
    only this exact target counts, and a layout search's run gives "plan" (`stored_plan` reads it)."""
    got = db.latest_pipeline(model_key(model.mod), [tuning_target(target, threads)], model.name)
    return got[0] if got is not None else None


def measure_pipelines(model: Model, target: str, threads: int | None,
                      pipelines: tuple[str, ...] | None = None, keep_build: bool = False) -> PipelineChoice:
    """Build `model` with each candidate pipeline and default schedules; the fastest, timed
    interleaved (candidates that build the same kernels still cost one build each). A candidate
    that does not build for this model drops out, named with its error in the choice's `note` (a
    pipeline failing on a model is a compiler defect the user should see, not a silent narrowing);
    when none builds, the first one's error is raised.
    `keep_build`: the choice keeps the winner's build, for a caller that wants exactly that build."""
    from autorelay.errors import AutoRelayError

    built, prepared, errors = [], {}, []
    asked = pipelines or candidates(target, threads)
    for p in asked:
        try:
            prepared[p] = prepare_model(model, target, threads=threads, pipeline=p)
            built.append((p, build_model(model, None, target, threads=threads, pipeline=p,
                                         prepared=prepared[p])))
        except AutoRelayError as e:
            errors.append((p, e))
    if not built:
        raise errors[0][1]
    dropped = "; ".join(f"pipeline {p} did not build: {str(e).splitlines()[0]}" for p, e in errors)
    if len(asked) == 1:  # nothing to compare (a GPU target's one pipeline)
        only, exe = built[0]
        return PipelineChoice(only, "the only candidate", {}, exe if keep_build else None, prepared[only])
    times = time_interleaved([exe for _, exe in built], run_inputs(built[0][1], model), rounds=9)
    latencies = {p: t for (p, _), t in zip(built, times)}
    best = min(latencies, key=latencies.__getitem__)
    return PipelineChoice(best, "measured", latencies, dict(built)[best] if keep_build else None,
                          prepared[best], note=dropped)


def prepare_plan(model: Model, target: str, threads: int | None, plan: LayoutPlan) -> PreparedModel:
    """`model` prepared with the pipeline that realises `plan` (pipeline name "plan")."""
    tgt = resolve_target(target, threads)
    return PreparedModel(model, tgt, PLAN, model.optimized(plan_pipeline(plan)))


def stored_plan(model: Model, db: Any, target: str, threads: int | None) -> PipelineChoice | str:
    """The choice the log's latest layout search for this model and target made: its plan (prepared),
    or the per-model pipeline that beat it; else the reason there is none (no plan, a stale plan)."""
    tgt = tuning_target(target, threads)
    rec = db.layout_plan(model_key(model.mod), tgt) if db is not None else None
    if rec is None:
        return f"no layout plan of {model.name} on {tgt} in the log"
    if not rec.chosen:
        return PipelineChoice(rec.winner, f"layout search #{rec.id} found the per-model pipeline faster")
    try:
        plan = LayoutPlan.from_json(rec.plan)
    except (ValueError, TypeError) as e:
        return f"layout plan #{rec.id} in the log is unreadable ({e})"
    layers = conv_layers(model.mod)
    unknown = plan.unknown_layers(layers)
    if unknown:
        return (f"stale layout plan #{rec.id}: it names {', '.join(unknown[:5])}"
                f"{' ...' if len(unknown) > 5 else ''}, which {model.name} lacks ({len(layers)} conv layers)")
    return PipelineChoice(PLAN, f"layout plan #{rec.id} from the log", plan=plan,
                          prepared=prepare_plan(model, target, threads, plan))


def choose_pipeline(pipeline: str, model: Model, db: Any, target: str, threads: int | None,
                    keep_build: bool = False) -> PipelineChoice:
    """Resolve `pipeline`: a name stands for itself; `auto` is the log's pick for this model
    (`db` may be None: no log), else the log's layout plan for it when one won its search (a
    quantized model's, stored by `autorelay quantize`), else the measured fastest candidate (with
    its default-schedule build when `keep_build`); `plan` (given, or the log's pick) is the log's
    layout plan (`stored_plan`), else — with a `note` saying why — the per-model pipeline the log
    tuned the model with, or failing that the measured per-model choice."""
    logged = logged_pipeline(db, model, target, threads) if db is not None and pipeline == AUTO else None
    if pipeline == PLAN or logged == PLAN:
        got = stored_plan(model, db, target, threads)
        if isinstance(got, PipelineChoice):
            return got
        tuned_with = logged if pipeline == AUTO or db is None else logged_pipeline(db, model, target, threads)
        if tuned_with not in (None, PLAN):  # its kernels were tuned for that pipeline's layouts
            return PipelineChoice(tuned_with, "logged", note=f"{got}; fell back to the pipeline the log "
                                                              f"tuned it with, {tuned_with}")
        fallback = measure_pipelines(model, target, threads, keep_build=keep_build)
        fallback.note = "; ".join(filter(None, (f"{got}; fell back to the per-model pipeline "
                                                f"{fallback.pipeline}", fallback.note)))
        return fallback
    if pipeline != AUTO:
        return PipelineChoice(pipeline, "given")
    if logged is not None:
        return PipelineChoice(logged, "logged")
    if db is not None:  # never tuned, but a layout plan is stored for it
        got = stored_plan(model, db, target, threads)
        if isinstance(got, PipelineChoice) and got.pipeline == PLAN:
            return got
    return measure_pipelines(model, target, threads, keep_build=keep_build)


__all__ = ["AUTO", "CANDIDATES", "PLAN", "PipelineChoice", "candidates", "choose_pipeline", "logged_pipeline",
           "measure_pipelines", "prepare_plan", "stored_plan"]
