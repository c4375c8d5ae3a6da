"""Whole models outside the tuning loop: load one (zoo name or ONNX file), build it with the tuning
log's best schedules, and time it end to end.

These are the pieces `autorelay compile`, `autorelay run` and `tune_model`'s before/after
comparison share. Latencies of two executables are taken interleaved (A, B, A, B, …) so a noisy
moment on this shared machine hits both alike, and the median is reported.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autorelay.build_module import build_prepared
from autorelay.codegen import host_threads, resolve_target
from autorelay.ir.module import IRModule
from autorelay.lower import model_key
from autorelay.primitive import KernelMemo
from autorelay.target import Target
from autorelay.transform.pass_memo import PassMemo
from search.extract import BoundSource, Extraction, extract_prepared, optimize


@dataclass
class Model:
    """A loaded model: its IR, weights, a name for the log and reports, and sample inputs."""

    name: str
    mod: IRModule
    params: dict[str, np.ndarray]
    inputs: dict[str, np.ndarray]
    # the results of the passes its preparations ran, for the next ones that begin alike
    passes: PassMemo = field(default_factory=PassMemo, repr=False, compare=False)
    # seconds of the layout transforms its layout searches timed: (NCHW shape, from, to, target) ->
    # seconds (`search.layout_costs.transform_seconds`)
    transforms: dict[tuple, float] = field(default_factory=dict, repr=False, compare=False)

    def optimized(self, pipeline: str | Any = "default") -> IRModule:
        """The IR a build of this model lowers under `pipeline` (`search.extract.optimize`): a
        search prepares a model under many pipelines and layout plans that begin with the same
        passes, which run once (`passes`)."""
        return optimize(self.mod, self.params, pipeline, memo=self.passes)


def default_threads() -> int:
    """Kernel threads when none are given: every core this process may use (like ONNX Runtime)."""
    return host_threads()


def load_model(spec: str, *, image_size: int | None = None, batch_size: int = 1, seed: int = 1) -> Model:
    """`spec` is a zoo model name (`resnet-18`, `resnet18`, `mlp`, …) or a path to an `.onnx` file.
    `image_size` shrinks image models and `batch_size` sets the batch (zoo only: an ONNX file fixes
    both); inputs are seeded random values. The name says both when they are not the defaults."""
    from autorelay.frontend import zoo

    if spec.lower().endswith(".onnx") or os.path.sep in spec:
        if image_size is not None:
            raise ValueError("--image-size applies to zoo models only; an ONNX file fixes its image size")
        if not os.path.exists(spec):
            raise FileNotFoundError(f"model file {spec!r} does not exist")
        mod, params = _onnx_at_batch(spec, batch_size)
        name = os.path.basename(spec) + (f":b{batch_size}" if batch_size != 1 else "")
    else:
        try:
            name = zoo.canonical_name(spec)
        except KeyError as e:
            raise ValueError(f"{e.args[0]}; or give a path to an .onnx file") from None
        options = {"image_size": image_size} if image_size is not None else {}
        try:
            mod, params = zoo.get(name, batch_size=batch_size, **options)
        except TypeError as e:
            if image_size is None:
                raise
            raise ValueError(f"model {name} does not take an image size ({e})") from None
        if image_size is not None:
            name = f"{name}@{image_size}"
        if batch_size != 1:
            name = f"{name}:b{batch_size}"
    params = dict(params)
    return Model(name, mod, params, zoo.random_inputs(mod, params, seed))


def _onnx_at_batch(path: str, batch_size: int) -> tuple[Any, dict]:
    """An ONNX file imported with static shapes, as builds and tuning logs need: a symbolic
    leading (batch) axis of an input becomes `batch_size`; any other symbolic extent is refused
    by name. `batch_size` must match a batch axis the file fixes."""
    from autorelay.frontend import from_onnx
    from autorelay.ir.types import TensorType

    mod, params = from_onnx(path)
    shapes: dict[str, tuple] = {}
    fixed: list[tuple[str, int]] = []
    for p in mod["main"].params:
        t = p.type_annotation
        if p.name_hint in params or not isinstance(t, TensorType) or not t.shape:
            continue
        dims = tuple(t.shape)
        if isinstance(dims[0], int):
            fixed.append((p.name_hint, dims[0]))
        symbolic = [str(d) for d in dims[1:] if not isinstance(d, int)]
        if symbolic:
            raise ValueError(f"{os.path.basename(path)}: input {p.name_hint!r} of shape "
                             f"({', '.join(map(str, dims))}) has symbolic extents ({', '.join(symbolic)}) "
                             f"past its batch axis; builds and tuning logs need static shapes (the Python "
                             f"API builds such a model per input shape: autorelay.build)")
        if not isinstance(dims[0], int):
            shapes[p.name_hint] = (batch_size, *dims[1:])
    if batch_size != 1 and any(b != batch_size for _, b in fixed):
        raise ValueError(f"--batch {batch_size}: {os.path.basename(path)} fixes the batch of "
                         f"{', '.join(f'{n!r} to {b}' for n, b in fixed)}")
    return from_onnx(path, shape=shapes) if shapes else (mod, params)


def tuning_target(target: str | Target, threads: int | None) -> str:
    """The name measurements of kernels for `target` with `threads` threads are logged under."""
    return str(resolve_target(target, threads))


@dataclass
class PreparedModel:
    """A model prepared once for one target and pipeline (`autorelay.transform.prepare`): the task
    list, the schedule source's transfer check and every build of a tuning run start from it."""

    model: Model
    target: Target
    pipeline: str
    module: IRModule
    _extraction: Extraction | None = None

    @property
    def extraction(self) -> Extraction:
        if self._extraction is None:
            self._extraction = extract_prepared(self.module, self.target)
        return self._extraction

    @property
    def key(self) -> str:
        """The model's key in the log (`autorelay.lower.model_key`)."""
        return model_key(self.model.mod)


def prepare_model(model: Model, target: str | Target = "llvm", *, threads: int | None = None,
                  pipeline: str = "default") -> PreparedModel:
    tgt = resolve_target(target, threads)
    return PreparedModel(model, tgt, pipeline, model.optimized(pipeline))


def open_db(db: Any) -> tuple[Any, bool]:
    """(TuningDB, whether we opened it): accepts an open TuningDB, a URL/path, or None (default)."""
    import tuning_db

    if db is None or isinstance(db, str | os.PathLike):
        return tuning_db.open(db), True
    return db, False


def schedule_source(db: Any, model: Model, target: str | Target = "llvm", *, threads: int | None = None,
                    pipeline: str = "default", prepared: PreparedModel | None = None) -> BoundSource:
    """The log's lookup object for building `model`, with the model's tasks guarding transfers."""
    prepared = prepared or prepare_model(model, target, threads=threads, pipeline=pipeline)
    return BoundSource(db, prepared.target, prepared.extraction.tasks)


def build_model(model: Model, source: Any = None, target: str | Target = "llvm", *,
                threads: int | None = None, pipeline: str = "default",
                prepared: PreparedModel | None = None, memo: KernelMemo | None = None) -> Any:
    """The model built with `source` (None: the heuristic defaults), from `prepared` when given;
    `memo`: kernels shared with the other builds of a search (`autorelay.primitive.KernelMemo`)."""
    prepared = prepared or prepare_model(model, target, threads=threads, pipeline=pipeline)
    exe = build_prepared(prepared.module, prepared.target, source, memo=memo)
    exe.pipeline = prepared.pipeline
    return exe


def run_inputs(exe: Any, model: Model) -> list[np.ndarray]:
    """The model's sample inputs in the executable's parameter order."""
    missing = [n for n in exe.input_names if n not in model.inputs]
    if missing:
        raise ValueError(f"model {model.name}: no sample input for {', '.join(missing)}")
    return [model.inputs[n] for n in exe.input_names]


def time_interleaved(exes: Sequence[Any], inputs: Sequence[np.ndarray], *, rounds: int = 15,
                     min_seconds: float = 0.05) -> list[float]:
    """Median seconds per call of each executable, timed round-robin after one warm-up call each.
    Each round runs an executable enough times to last `min_seconds` (fast models are timed in
    batches, so timer resolution does not dominate)."""
    samples = interleaved_samples(exes, inputs, rounds=rounds, min_seconds=min_seconds)
    return [statistics.median(s) for s in samples]


def interleaved_samples(exes: Sequence[Any], inputs: Sequence[np.ndarray], *, rounds: int = 15,
                        min_seconds: float = 0.05) -> list[list[float]]:
    """`time_interleaved`'s per-round seconds per call of each executable (for a spread)."""
    numbers = []
    for exe in exes:
        t0 = time.perf_counter()
        exe(*inputs)
        first = time.perf_counter() - t0
        numbers.append(max(1, int(min_seconds / max(first, 1e-6))))
    samples: list[list[float]] = [[] for _ in exes]
    for r in range(rounds):
        order = list(range(len(exes)))
        if r % 2:
            order.reverse()
        for i in order:
            t0 = time.perf_counter()
            for _ in range(numbers[i]):
                exes[i](*inputs)
            samples[i].append((time.perf_counter() - t0) / numbers[i])
    return samples


def _fields(out: Any) -> list[Any]:
    """A model's outputs as a list: a tuple's fields, or the one output."""
    return list(out) if isinstance(out, list | tuple) else [out]


def max_difference(a: Any, b: Any) -> float:
    """Largest absolute difference between two outputs (tuples compared field by field)."""
    xs, ys = _fields(a), _fields(b)
    if len(xs) != len(ys):
        return float("inf")
    return max((float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)), initial=0.0))
                for x, y in zip(xs, ys)), default=0.0)


# two builds of one model whose outputs differ by more than this share of the outputs' magnitude
# disagree beyond rounding (F(4x4) Winograd through a deep network loses about three digits)
DISAGREEMENT = 1e-2


def output_scale(out: Any) -> float:
    """The largest finite magnitude among a model's outputs (1 when they hold none)."""
    arrays = [np.asarray(x, np.float64) for x in _fields(out)]
    mags = [np.abs(a[np.isfinite(a)]).max(initial=0.0) for a in arrays]
    return float(max(mags, default=0.0)) or 1.0


def disagreement(what: str, diff: float, scale: float) -> str | None:
    """A warning when two builds' outputs differ beyond rounding (`max_difference` against the
    reference build's `output_scale`): one of them computes wrongly, a compiler defect to report."""
    if not diff > DISAGREEMENT * scale:  # NaN (outputs that hold NaN in both) is no evidence
        return None
    return (f"warning: {what} differ by {diff:.3g}, {diff / scale:.1%} of the outputs' magnitude: one of the "
            "builds computes wrongly (a compiler defect; please report it with the model)")


@dataclass
class CompileResult:
    exe: Any
    source_counts: dict[str, int]  # kernel steps per schedule source (tuned/transferred/default/fallback)
    seconds: float
    pipeline: str = "default"  # the pass pipeline it was built with
    note: str = ""  # a warning from the pipeline choice (a stale or missing layout plan), else ""


def compile_model(model: Model, db: Any = None, target: str = "llvm", *, threads: int | None = None,
                  pipeline: str = "default", kernel_cache: str | None = None) -> CompileResult:
    """Build with the best logged schedules of `db` (a TuningDB, URL, or None for no log);
    `pipeline` "auto" builds with the pipeline the log's run for this model tuned with;
    `kernel_cache`: a folder keeping the emitted and compiled kernels for the next build, in this
    process or another (`autorelay.kernel_store`)."""
    from search.pipeline_choice import choose_pipeline

    t0 = time.perf_counter()
    memo = KernelMemo(cache_dir=kernel_cache)
    if db is None:
        choice = choose_pipeline(pipeline, model, None, target, threads, keep_build=True)
        pipeline = choice.pipeline
        exe = choice.exe or build_model(model, None, target, threads=threads, pipeline=pipeline,
                                        prepared=choice.prepared, memo=memo)
    else:
        handle, own = open_db(db)
        try:
            choice = choose_pipeline(pipeline, model, handle, target, threads)
            pipeline = choice.pipeline
            prepared = choice.prepared or prepare_model(model, target, threads=threads, pipeline=pipeline)
            src = schedule_source(handle, model, prepared=prepared)
            exe = build_model(model, src, prepared=prepared, memo=memo)
        finally:
            if own:
                handle.close()
    counts = dict(exe.report.sources)
    return CompileResult(exe, counts, time.perf_counter() - t0, pipeline, choice.note)


@dataclass
class RunResult:
    compile: CompileResult
    first_call_s: float
    latency_s: float  # median of `repeat` timed calls
    outputs: Any


WARM_UP_S = 0.1  # `run_model`'s untimed calls after the first, in seconds


def run_model(model: Model, db: Any = None, target: str = "llvm", *, threads: int | None = None,
              pipeline: str = "default", repeat: int = 10, inputs: Mapping[str, np.ndarray] | None = None,
              kernel_cache: str | None = None) -> RunResult:
    """Build (with the log's schedules when `db` is given; `kernel_cache` as `compile_model`'s),
    run once, warm up for `WARM_UP_S`, then time `repeat` calls and profile every kernel (the
    report's time shares). Without the warm-up a small model's first timed calls still meet cold
    caches and a thread team not yet spinning: ten calls of a 0.1 ms CNN gave medians of 0.09 and
    0.17 ms in two runs."""
    comp = compile_model(model, db, target, threads=threads, pipeline=pipeline, kernel_cache=kernel_cache)
    exe = comp.exe
    if inputs is not None:
        model = Model(model.name, model.mod, model.params, dict(inputs))
    args = run_inputs(exe, model)
    t0 = time.perf_counter()
    out = exe(*args)
    first = time.perf_counter() - t0
    warm_until = time.perf_counter() + WARM_UP_S
    while time.perf_counter() < warm_until:
        exe(*args)
    times = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        exe(*args)
        times.append(time.perf_counter() - t0)
    exe.profile(*args, repeat=max(1, min(repeat, 10)))
    return RunResult(comp, first, statistics.median(times), out)


__all__ = [
    "CompileResult",
    "Model",
    "PreparedModel",
    "RunResult",
    "build_model",
    "compile_model",
    "default_threads",
    "disagreement",
    "interleaved_samples",
    "load_model",
    "max_difference",
    "open_db",
    "output_scale",
    "prepare_model",
    "run_inputs",
    "run_model",
    "schedule_source",
    "time_interleaved",
    "tuning_target",
]
