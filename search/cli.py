"""The `autorelay` command line. It lives in `search` because that is where the compiler
(`autorelay`) and the tuning log (`tuning_db`) are composed; each subcommand is a small function
registered below.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from search.cli_checks import check_output_file, kernel_cache_folder, pipeline_name
from search.textfile import read_program_text
from tuning_db.cli_args import nonneg_int, positive_float, positive_int


def _cmd_check(args: argparse.Namespace) -> int:
    from autorelay.errors import AutoRelayError
    from autorelay.ir.printer import astext
    from autorelay.text_format import parse
    from autorelay.typing import infer_types

    try:
        text = read_program_text(args.file)
    except OSError as e:
        print(f"autorelay check: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"autorelay check: {e}", file=sys.stderr)
        return 2
    try:
        mod = infer_types(parse(text, source=args.file))
    except AutoRelayError as e:
        print(f"autorelay check: {e}", file=sys.stderr)
        return 1
    print(astext(mod, show_types=True))
    return 0


def _fail(cmd: str, e: BaseException) -> int:
    print(f"autorelay {cmd}: {e}", file=sys.stderr)
    return 1


def _warn_fallbacks(cmd: str, report: object) -> None:
    """One warning line when kernels of the build run through the ops' NumPy references: they are
    slow and no tuning can touch them (the report's `fallback` rows say why each one has no kernel)."""
    rows = list(getattr(report, "fallbacks", ()))
    if rows:
        names = ", ".join(dict.fromkeys(r.name for r in rows))
        print(f"autorelay {cmd}: warning: {len(rows)} kernel(s) run through the NumPy fallback, untouched by "
              f"tuning: {names} (see the 'fallback' rows of the report)", file=sys.stderr)


def _load(args: argparse.Namespace) -> tuple[object, int]:
    from search.models import default_threads, load_model

    threads = args.threads if args.threads is not None else default_threads()
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    return load_model(args.model, image_size=args.image_size, batch_size=args.batch), threads


_ERRORS: tuple[type[BaseException], ...] = (ValueError, KeyError, OSError)


def _errors() -> tuple[type[BaseException], ...]:
    from autorelay.errors import AutoRelayError
    from tuning_db import TuningDBError

    return (*_ERRORS, AutoRelayError, TuningDBError)


def _cmd_tune(args: argparse.Namespace) -> int:
    from search.measure import TimingSettings
    from search.model_tuning import tune_model
    from search.progress import ConsoleProgress

    try:
        model, threads = _load(args)
        from search import vta_cli

        if vta_cli.is_accelerator(args.target):
            return vta_cli.tune(args, model)
        pipeline = args.pipeline
        if args.precision != "fp32":  # tune the quantized model's kernels (int8 ones and the rest)
            from search.models import open_db
            from search.quantize_cli import apply_precision

            db, _ = open_db(args.db)
            with db:
                model, pipeline, note = apply_precision(args, model, db, threads)
            print(note)
        result = tune_model(model, trials=args.trials, tuner=args.tuner, db=args.db, target=args.target,
                            threads=threads, pipeline=pipeline, seed=args.seed,
                            timing=TimingSettings(timeout=args.timeout), progress=ConsoleProgress(),
                            compare=not args.no_compare, executor=args.executor)
    except KeyboardInterrupt:
        print("autorelay tune: interrupted; every finished measurement is in the log", file=sys.stderr)
        return 130
    except _errors() as e:
        return _fail("tune", e)
    print(result.table())
    return 130 if result.interrupted else 0


def _cmd_quantize(args: argparse.Namespace) -> int:
    from search.quantize_cli import run_quantize

    try:
        model, threads = _load(args)
        return run_quantize(args, model, threads)
    except KeyboardInterrupt:
        print("autorelay quantize: interrupted; nothing was stored", file=sys.stderr)
        return 130
    except _errors() as e:
        return _fail("quantize", e)


def _cmd_compile(args: argparse.Namespace) -> int:
    from search.models import compile_model, open_db
    from search.quantize_cli import apply_precision

    try:
        model, threads = _load(args)
        from search import vta_cli

        if vta_cli.is_accelerator(args.target):
            if args.output:  # say so before the work, not after
                return _fail("compile", ValueError("--output: executables with accelerator layers cannot be "
                                                   "saved yet (build them again with --target vta)"))
            exe, acc, seconds = vta_cli.build(args, model, threads)
            print(f"{acc.note}\n{acc.report}\n{exe.report}\ncompiled {model.name} for vta in {seconds:.1f} s")
            return 0
        if args.output:
            check_output_file(args.output)
        db, _ = open_db(args.db)  # no --db: the default log ($AUTORELAY_DB or the user's data directory)
        with db:
            model, pipeline, note = apply_precision(args, model, db, threads)
            res = compile_model(model, db, args.target, threads=threads, pipeline=pipeline,
                                kernel_cache=args.kernel_cache)
        if note:
            print(note)
        print(res.exe.report)
        _warn_fallbacks("compile", res.exe.report)
        if res.note:  # a stored layout plan that could not be used, and what was built instead
            print(f"autorelay compile: warning: {res.note}", file=sys.stderr)
        print(f"compiled {model.name} (pipeline {res.pipeline}) in {res.seconds:.1f} s; kernels by source: "
              + ", ".join(f"{k} {v}" for k, v in sorted(res.source_counts.items())))
        if args.output:
            if not hasattr(res.exe, "save"):
                return _fail("compile", ValueError("this executable cannot be saved (no save())"))
            res.exe.save(args.output)
            print(f"saved to {args.output}")
    except _errors() as e:
        return _fail("compile", e)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from search.models import open_db, run_inputs, run_model
    from search.quantize_cli import apply_precision

    try:
        model, threads = _load(args)
        from search import vta_cli

        if vta_cli.is_accelerator(args.target):
            exe, line = vta_cli.run(args, model, threads)
            print(f"{exe.report}\n{line}")
            return 0
        db, _ = open_db(args.db)  # like compile: the default log unless --db names another
        with db:
            model, pipeline, note = apply_precision(args, model, db, threads)
            res = run_model(model, db, args.target, threads=threads, pipeline=pipeline,
                            repeat=args.repeat, kernel_cache=args.kernel_cache)
    except _errors() as e:
        return _fail("run", e)
    if note:
        print(note)
    print(res.compile.exe.report)
    _warn_fallbacks("run", res.compile.exe.report)
    if res.compile.note:
        print(f"autorelay run: warning: {res.compile.note}", file=sys.stderr)
    exe = res.compile.exe
    where = f"{threads} threads"
    if exe.target.kind == "cuda":
        device = exe.device_ms(*run_inputs(exe, model))
        gpu = "the emulated GPU (the CPU)" if exe.target.emulated else "the GPU"
        where = f"on {gpu}, host copies included; device time {device:.3f} ms"
    print(f"{model.name}: built in {res.compile.seconds:.1f} s; first call {res.first_call_s * 1e3:.3f} ms, "
          f"median of {args.repeat} calls {res.latency_s * 1e3:.3f} ms ({where})")
    if args.segments and exe.target.kind != "cuda":
        _print_segments(exe, exe.profile_segments(*run_inputs(exe, model), repeat=min(args.repeat, 10)))
    return 0


def _kernel_cache_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel-cache", metavar="DIR", type=kernel_cache_folder,
                   default=os.environ.get("AUTORELAY_KERNEL_CACHE") or None,
                   help="keep the emitted and compiled kernels in this folder, so the next build (in any "
                        "process) reads them instead of compiling them again (default: "
                        "$AUTORELAY_KERNEL_CACHE, else none)")


def _print_segments(exe: Any, segments: list[list[tuple[str, float]]]) -> None:
    """The kernels that run as several loop nests, each nest's median time."""
    print("kernels run as several loop nests (us, median per nest):")
    for i, (row, nests) in enumerate(zip(exe.report.rows, segments)):
        if len(nests) > 1:
            print(f"{i:>3} {row.name[:34]:<34} "
                  + ", ".join(f"{re.sub(r'^k_[0-9a-f]+_', '', n)} {t * 1e6:.1f}" for n, t in nests))


def _model_args(p: argparse.ArgumentParser, db_help: str) -> None:
    p.add_argument("--model", required=True,
                   help="a zoo model (resnet-18, mobilenet-v2, mlp, ...) or a .onnx file")
    p.add_argument("--target", default="llvm", help="compilation target (default: llvm, the host CPU)")
    p.add_argument("--db", metavar="URL", default=None, help=db_help)
    p.add_argument("--image-size", type=positive_int, default=None, metavar="S",
                   help="input height/width for zoo image models (smaller: faster)")
    p.add_argument("--batch", type=positive_int, default=1, metavar="N",
                   help="batch size of a zoo model, or of an ONNX file whose batch axis is symbolic "
                        "(default 1); its kernels are other workloads in the log")
    p.add_argument("--threads", type=positive_int, default=None, metavar="T",
                   help="kernel threads (default: every core); part of the tuning target")
    p.add_argument("--pipeline", default="auto", type=pipeline_name,
                   help="pass pipeline: default, nchwc, nchwc16, nchwc-direct, nchwc16-direct, O0, or auto "
                        "(default): the one this model was tuned with in the log, else the fastest of those "
                        "the target suits (autorelay.transform.pipelines), measured; plan: "
                        "a channel block per conv layer (tune: chosen by dynamic programming over "
                        "measured costs; compile/run: the log's plan)")


def build_parser() -> argparse.ArgumentParser:
    from search.model_tuning import TUNER_CHOICES
    from search.quantize_cli import add_precision_args, add_quantize_command

    parser = argparse.ArgumentParser(prog="autorelay", description="AutoRelay: an autotuning DL compiler")
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="parse, type-check and print a Relay text program",
                           description="Parse and type-check a Relay text program and print it with its "
                                       "types. Exit status: 0 when it is well typed, 1 for a parse or type "
                                       "error (shown with its line:column), 2 when the file cannot be read.")
    check.add_argument("file", help="a .relay / .rly text file")
    check.set_defaults(func=_cmd_check)

    log_help = ("tuning log: file path, sqlite:///PATH or postgresql://... "
                "(default: $AUTORELAY_DB or the user's ")
    tune = sub.add_parser("tune", help="tune every kernel of a model into the tuning log")
    _model_args(tune, log_help + "data directory)")
    tune.add_argument("--trials", type=positive_int, required=True, metavar="N",
                      help="measurements for the whole model (logged ones count: rerun to resume)")
    tune.add_argument("--tuner", default="xgb", choices=TUNER_CHOICES)
    tune.add_argument("--timeout", type=positive_float, default=10.0, metavar="SEC",
                      help="per-candidate run timeout in seconds (a hanging kernel is killed)")
    tune.add_argument("--seed", type=nonneg_int, default=0)
    tune.add_argument("--executor", default=None, metavar="URL",
                      help="where candidates are built and timed: local (default) or dask://HOST:PORT "
                           "(a Dask scheduler; needs the 'dask' extra)")
    tune.add_argument("--no-compare", action="store_true",
                      help="skip the end-to-end before/after build and timing")
    add_precision_args(tune)
    tune.set_defaults(func=_cmd_tune)

    comp = sub.add_parser("compile", help="build a model with the best logged schedules")
    _model_args(comp, log_help + "data directory)")
    comp.add_argument("-o", "--output", metavar="PATH", help="save the executable here")
    _kernel_cache_arg(comp)
    add_precision_args(comp)
    comp.set_defaults(func=_cmd_compile)

    run = sub.add_parser("run", help="build a model and run it once: latency and the kernel report")
    _model_args(run, log_help + "data directory)")
    run.add_argument("--repeat", type=positive_int, default=10,
                     help="timed calls after the first (median shown)")
    run.add_argument("--segments", action="store_true",
                     help="also time each loop nest of the kernels that run as several (a padded copy, "
                          "the stages of a Winograd convolution)")
    _kernel_cache_arg(run)
    add_precision_args(run)
    run.set_defaults(func=_cmd_run)

    add_quantize_command(sub, _model_args, log_help + "data directory); the front is stored here",
                         _cmd_quantize)

    from reproduce.cli import add_reproduce_command  # published experiments, one command each

    add_reproduce_command(sub, log_help + "data directory); results are stored here")

    from tuning_db.cli import add_db_commands  # the `db` group: inspect and maintain the tuning log

    add_db_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        # `autorelay db stats | head`: the reader left; that is not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
