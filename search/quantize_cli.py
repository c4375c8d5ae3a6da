"""The command line of quantization: `autorelay quantize` (search per-layer precisions, store the
pick) and the `--precision plan|int8|bf16|fp32` option `compile`, `run` and `tune` share.

    autorelay quantize --model M (--calibration DIR | --calibration-random N) [--validation DIR]
                       [--method max|percentile|kl] --max-drop X --db URL [--trials N] [--plot out.png]
    autorelay compile --model M --db URL --precision plan      # the plan `quantize` stored

On a log whose float model has a layout plan (`tune --pipeline plan`), `quantize` measures the
precision plans on it and `--precision plan` rebuilds the quantized model with it.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING, Any

from tuning_db.cli_args import nonneg_int, positive_int

if TYPE_CHECKING:  # the CLI parser must stay cheap to import; models pull in the compiler
    from search.models import Model

METHODS = ("max", "percentile", "kl")
_RANDOM = re.compile(r"random\((\d+), seed=(\d+)\)")


def _max_drop(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (v >= 0 and v < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return v


def add_calibration_args(p: argparse.ArgumentParser, *, required: bool) -> None:
    g = p.add_mutually_exclusive_group(required=required)
    g.add_argument("--calibration", metavar="DIR",
                   help="calibration inputs: a folder of .npy/.npz batches or ONNX test data (input_*.pb)")
    g.add_argument("--calibration-random", type=positive_int, metavar="N",
                   help="calibrate on N batches of seeded random inputs instead")
    p.add_argument("--method", default="max", choices=METHODS,
                   help="activation range calibration (default: max)")


def add_precision_args(p: argparse.ArgumentParser) -> None:
    """`--precision` for compile / run, and what int8 and plan need."""
    p.add_argument("--precision", default="fp32", choices=("fp32", "int8", "bf16", "plan"),
                   help="fp32 (default); int8: every quantizable layer; bf16: every layer the bf16 kernels "
                        "run (bf16 weights and activations, fp32 accumulation; no calibration); plan: the "
                        "plan `autorelay quantize` stored in the log for this model and target")
    p.add_argument("--max-drop", type=_max_drop, default=None, metavar="X",
                   help="with --precision plan: the fastest stored plan losing at most X, instead of "
                        "the last search's pick")
    add_calibration_args(p, required=False)


def calibration_data(args: argparse.Namespace, model: Model, default_random: int | None = None) -> Any:
    from search.quant_data import load_folder, random_batches

    if args.calibration:
        return load_folder(args.calibration, model, what="calibration")
    n = args.calibration_random or default_random
    if n is None:
        raise ValueError("give --calibration DIR or --calibration-random N")
    return random_batches(model, n, seed=0)


def _stored_calibration(source: str, model: Model) -> Any:
    """The calibration data a stored plan was measured with, read again from its source."""
    from search.quant_data import load_folder, random_batches

    m = _RANDOM.fullmatch(source)
    if m:
        return random_batches(model, int(m.group(1)), seed=int(m.group(2)))
    return load_folder(source, model, what="calibration")


def _check_precision_options(args: argparse.Namespace) -> None:
    """Refuse options the chosen precision would ignore, instead of building without them."""
    def option(name: str, default: object = None) -> object:  # a caller's namespace may hold fewer
        return getattr(args, name, default)

    given = [flag for flag, on in (("--calibration", bool(option("calibration"))),
                                   ("--calibration-random", bool(option("calibration_random"))),
                                   ("--method", option("method", "max") != "max"),
                                   ("--max-drop", option("max_drop") is not None)) if on]
    if args.precision in ("fp32", "bf16") and given:
        why = "calibrates nothing" if args.precision == "bf16" else "quantizes nothing"
        raise ValueError(f"{', '.join(given)} apply to --precision int8 or plan; {args.precision} {why}")
    if args.precision == "int8" and option("max_drop") is not None:
        raise ValueError("--max-drop picks a stored plan within that drop: it applies to --precision plan, "
                         "not int8 (every quantizable layer)")


def _no_plan_message(db: Any, model: Model, target: str, max_drop: float | None) -> str:
    """Why no stored precision plan applies: plans on this target all lose more than the bound
    (then the smallest drop among them), plans only on other targets, or none at all."""
    from autorelay.lower import model_key

    key = model_key(model.mod)
    here = db.plans(key, target)
    if here and max_drop is not None:
        least = min(here, key=lambda r: r.accuracy_drop)
        return (f"the {len(here)} quantization plan(s) stored for {model.name} on {target} all lose more "
                f"than --max-drop {max_drop:g}: the smallest drop is {least.accuracy_drop:.4g} (plan "
                f"#{least.id}); raise --max-drop, or run `autorelay quantize --model {model.name} --max-drop "
                f"{max_drop:g}` to search plans within it")
    others = [t for t in db.plan_targets(key) if t != target]
    hint = f"; plans exist for {', '.join(others)}" if others else ""
    return (f"no quantization plan stored for {model.name} on {target} in {db.url}{hint} (run `autorelay "
            f"quantize --model {model.name} ...` first)")


def apply_precision(args: argparse.Namespace, model: Model, db: Any, threads: int) -> tuple[Model, str, str]:
    """(the model to build, the pipeline to build it with, a line saying what was applied)."""
    from autorelay.lower import model_key
    from search.models import tuning_target

    _check_precision_options(args)
    if args.precision == "fp32":
        return model, args.pipeline, ""
    from autorelay.transform.quantize import (
        Calibration,
        QuantizePlan,
        calibrate,
        quantizable_layers,
        quantize_model,
    )
    from search.models import Model
    from search.pipeline_choice import PLAN
    from search.quantize_search import quantized

    if args.precision == "bf16":  # bf16 has no ranges to calibrate: rounding is the whole mapping
        qmod, qparams = quantize_model(model.mod, model.params, Calibration("max", {}),
                                       QuantizePlan.uniform("bf16"))
        note = "precision bf16 (every layer the bf16 kernels run; the others stay fp32)"
        return Model(f"{model.name}[bf16]", qmod, dict(qparams), model.inputs), args.pipeline, note

    pipeline = args.pipeline
    own_data = bool(args.calibration or args.calibration_random)
    calib = None
    if args.precision == "int8":
        data = calibration_data(args, model, default_random=8)
        plan = QuantizePlan({n: "int8" for n in quantizable_layers(model.mod)})
        note = f"precision int8 (every quantizable layer; calibrated {args.method} on {data.source})"
    else:
        target = tuning_target(args.target, threads)
        rec = db.best_plan(model_key(model.mod), target, max_drop=args.max_drop)
        if rec is None:
            raise ValueError(_no_plan_message(db, model, target, args.max_drop))
        plan = QuantizePlan.from_json(rec.plan)
        info = rec.info or {}
        if own_data:
            data = calibration_data(args, model)
            how = f"calibrated {args.method} on {data.source}"
        elif isinstance(info.get("calibration_ranges"), dict):
            calib = Calibration.from_json(info["calibration_ranges"])  # exactly what was measured
            how = f"the stored {rec.calibration} calibration of {info.get('calibration_source', '?')}"
        else:
            data = _stored_calibration(str(info.get("calibration_source", "")), model)
            args.method = rec.calibration
            how = f"calibrated {args.method} on {data.source}"
        if pipeline == "auto" and isinstance(info.get("pipeline"), str) and info["pipeline"] != PLAN:
            pipeline = info["pipeline"]  # the named pipeline it was measured with
        # measured on a layout plan: `auto` finds the quantized model's renamed plan in the log
        on_layout = " on the stored layout plan" if info.get("pipeline") == PLAN else ""
        note = (f"precision plan #{rec.id} ({rec.metric} drop {rec.accuracy_drop:.4g}, measured{on_layout} "
                f"{rec.latency_ms:.4g} ms vs fp32 {rec.fp32_latency_ms:.4g} ms; {how})")
    if calib is None:
        calib = calibrate(model.mod, model.params, data.batches, method=args.method, progress=False)
    # pipeline "auto": chosen for the quantized model
    return quantized(model, calib, plan, args.target, threads), pipeline, note


def _plot(result: Any, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plot needs matplotlib (pip install -e '.[plots]')") from None
    pct = 100.0 if result.metric == "top1" else 1.0
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.scatter([p.latency_ms for p in result.points], [p.drop * pct for p in result.points],
               c="0.7", label="measured plans")
    ax.plot([p.latency_ms for p in result.front], [p.drop * pct for p in result.front], "o-",
            label="Pareto front")
    if result.chosen is not None:
        ax.scatter([result.chosen.latency_ms], [result.chosen.drop * pct], s=160, facecolors="none",
                   edgecolors="red", label="chosen")
    ax.axhline(result.max_drop * pct, color="red", ls=":", label="bound")
    ax.set_xlabel("end-to-end latency (ms)")
    ax.set_ylabel("top-1 drop (points)" if result.metric == "top1" else "relative output error")
    ax.set_title(f"{result.model}: precision plans")
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as e:
        raise ValueError(f"cannot write the plot to {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)


def run_quantize(args: argparse.Namespace, model: Model, threads: int) -> int:
    """`autorelay quantize` once the model is loaded: search, print the front, plot, store."""
    from search.models import open_db
    from search.quant_data import load_folder, random_batches
    from search.quantize_search import search_precisions

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    calib = calibration_data(args, model)
    if args.validation:
        valid = load_folder(args.validation, model, what="validation")
    else:
        valid = random_batches(model, 8, seed=1)
        progress(f"no --validation: scoring the relative output error on {valid.source} inputs")
    db, _ = open_db(args.db)
    with db:
        pipeline, layout = args.pipeline, None
        if pipeline in ("auto", "plan"):  # the float model's (logged, else measured): every plan uses it
            from search.pipeline_choice import choose_pipeline

            choice = choose_pipeline(pipeline, model, db, args.target, threads)
            pipeline, layout = choice.pipeline, choice.plan  # a layout plan: int8 layers run blocked
            progress(f"{choice.describe()}: the fp32 model's, which every precision plan keeps")
        result = search_precisions(model, calib, valid, max_drop=args.max_drop, db=db, target=args.target,
                                   threads=threads, pipeline=pipeline, method=args.method,
                                   trials=args.trials, seed=args.seed, progress=progress, layout=layout)
    print(result.table())
    if args.plot:
        _plot(result, args.plot)
        print(f"plot saved to {args.plot}")
    return 0 if result.chosen is not None else 1


def add_quantize_command(sub: Any, model_args: Any, log_help: str, func: Any) -> None:
    q = sub.add_parser("quantize", help="search per-layer int8/fp32 precisions; store the fastest plan "
                                        "within an accuracy bound")
    model_args(q, log_help)
    add_calibration_args(q, required=True)
    q.add_argument("--validation", metavar="DIR",
                   help="validation inputs (+ labels.npy: top-1); default: random inputs, output error")
    q.add_argument("--max-drop", type=_max_drop, required=True, metavar="X",
                   help="accuracy the plan may lose: top-1 as a fraction (0.01 = 1 point) with labels, "
                        "else the relative output error against fp32")
    q.add_argument("--trials", type=positive_int, default=16, metavar="N",
                   help="plans the NSGA-II search measures after the per-layer sensitivity (default 16)")
    q.add_argument("--seed", type=nonneg_int, default=0)
    q.add_argument("--plot", metavar="PNG", help="save the measured plans and the front as a plot")
    q.set_defaults(func=func)


__all__ = ["METHODS", "add_calibration_args", "add_precision_args", "add_quantize_command",
           "apply_precision", "calibration_data", "run_quantize"]
