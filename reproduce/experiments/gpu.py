"""Relay/TVM's GPU results, as far as the CUDA backend goes today: SGEMM (the template's default and
a random sweep) beside cuBLAS, a 3-layer MLP beside PyTorch CUDA, and whole models (ResNet-18,
MobileNet-v2, ...) beside PyTorch CUDA once `autorelay.build` builds models for `cuda`.

Needs an NVIDIA GPU and its driver: without one, `available()` returns the driver's one-line reason
and the experiment does not run. Whole-model units are listed only when the builder can build a
model for `cuda` (asked of the builder itself, see `reproduce.gpu_measure.cuda_models_unsupported`);
until then the report says why they are missing rather than showing failures. PyTorch columns are
empty (with one line on how to install it) where torch with CUDA is not installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reproduce.experiment import Context, Experiment, Report, Row, Unit
from reproduce.output import md_table

QUICK_SIZES, FULL_SIZES = (512, 1024), (512, 1024, 2048)
QUICK_SWEEP, FULL_SWEEP = 4, 12  # random cuda_dense configs tried per SGEMM size
# (model, batch): the ResNet-18 at batch 1 (launches and fusion dominate) and 32 (arithmetic)
QUICK_MODELS = (("resnet-18", 1),)
FULL_MODELS = (("resnet-18", 1), ("resnet-18", 32), ("mobilenet-v2", 1), ("vgg-16", 1), ("nature-dqn", 1),
               ("dcgan", 1))
REPEAT = 50


def _available() -> str | None:
    from reproduce.gpu_measure import gpu_unavailable

    return gpu_unavailable()


def _units(ctx: Context) -> list[Unit]:
    from reproduce.gpu_measure import cuda_models_unsupported

    sweep = QUICK_SWEEP if ctx.quick else FULL_SWEEP
    units = [Unit(f"sgemm {n}", {"kind": "sgemm", "n": n, "sweep": sweep}, expected_s=2.0 + sweep)
             for n in (QUICK_SIZES if ctx.quick else FULL_SIZES)]
    units.append(Unit("mlp batch 64", {"kind": "mlp", "batch": 64}, expected_s=5.0))
    if cuda_models_unsupported() is None:
        for m, b in QUICK_MODELS if ctx.quick else FULL_MODELS:
            name = f"model {m}" + (f" batch {b}" if b != 1 else "")
            units.append(Unit(name, {"kind": "model", "model": m, "batch": b}, expected_s=60.0))
    return units


def _measure(ctx: Context, unit: Unit) -> Mapping[str, Any]:
    from autorelay.codegen import resolve_target
    from autorelay.codegen.nvptx.driver import open_driver
    from reproduce.gpu_measure import mlp, model_ms, sgemm

    target = resolve_target("cuda")
    p = unit.params
    if p["kind"] == "model":
        row = model_ms(p["model"], target, REPEAT, seed=ctx.seed, batch=p.get("batch", 1))
    else:
        drv = open_driver()
        row = sgemm(target, p["n"], p["sweep"], REPEAT, ctx.seed) if p["kind"] == "sgemm" else \
            mlp(drv, target, REPEAT, p["batch"])
    return {"kind": p["kind"], "target": str(target), **row}


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, int | float) and isinstance(b, int | float) and b else None


def _report(ctx: Context, rows: Sequence[Row]) -> Report:
    from reproduce.gpu_measure import cuda_models_unsupported

    kinds: dict[str, list[Mapping[str, Any]]] = {"sgemm": [], "mlp": [], "model": []}
    for r in rows:
        kinds.setdefault(r.result["kind"], []).append(r.result)
    kinds["sgemm"].sort(key=lambda x: x["n"])
    parts = []
    if kinds["sgemm"]:
        body = [[x["n"], x["default_gflops"], x["best_gflops"], x["sweep"], x["cublas_gflops"],
                 _ratio(x["best_gflops"], x["cublas_gflops"])] for x in kinds["sgemm"]]
        headers = ["n", "default", "best of sweep", "configs tried", "cuBLAS (PyTorch)", "best / cuBLAS"]
        parts += [f"## SGEMM on {kinds['sgemm'][0]['target']} (GFLOP/s, CUDA events, checked against NumPy)",
                  "", md_table(headers, body, digits=1), ""]
    if kinds["mlp"]:
        body = [[x["batch"], x["kernels"], x["ms"], x["torch_ms"], _ratio(x["torch_ms"], x["ms"])]
                for x in kinds["mlp"]]
        parts += ["## MLP 784-512-256-10 + softmax (ms per forward, kernels on device buffers)", "",
                  md_table(["batch", "kernels", "AutoRelay ms", "PyTorch CUDA ms", "PyTorch / AutoRelay"],
                           body, digits=4), ""]
    if kinds["model"]:
        body = [[x["model"], x.get("batch", 1), x["ms"], x.get("call_ms"), x["max_rel_err"], x["torch_ms"],
                 _ratio(x["torch_ms"], x["ms"])] for x in kinds["model"]]
        parts += ["## Models, default schedules (device ms per forward, input on the device; the call "
                  "with host copies beside it)", "",
                  md_table(["model", "batch", "AutoRelay ms", "per call ms", "max rel. error",
                            "PyTorch eager ms", "PyTorch / AutoRelay"], body, digits=3), ""]
    else:
        why = cuda_models_unsupported()
        if why:
            parts.append(f"No whole-model rows: {why}.\n")
    torch_cols = [x.get("cublas_gflops", x.get("torch_ms")) for k in kinds.values() for x in k]
    if torch_cols and all(v is None for v in torch_cols):
        parts.append("PyTorch columns empty: torch with CUDA is not installed (`pip install torch` with a "
                     "CUDA build adds them).\n")
    csv_rows = [{"unit": r.unit, "machine": r.machine, **r.result} for r in rows]
    figures = {"gpu_sgemm": lambda fig: _draw(fig, kinds["sgemm"])} if kinds["sgemm"] else {}
    return Report(csv_rows, "\n".join(parts) + "\n", figures)


def _draw(fig: Any, sgemm: Sequence[Mapping[str, Any]]) -> None:
    ax = fig.add_subplot()
    series = [("default_gflops", "AutoRelay default"), ("best_gflops", "AutoRelay best of sweep"),
              ("cublas_gflops", "cuBLAS (PyTorch)")]
    for k, (key, label) in enumerate(series):
        ax.bar([i + 0.27 * k for i in range(len(sgemm))], [x.get(key) or 0 for x in sgemm], width=0.27,
               label=label)
    ax.set_xticks([i + 0.27 for i in range(len(sgemm))], [f"n={x['n']}" for x in sgemm])
    ax.set_ylabel("GFLOP/s")
    ax.set_title("SGEMM on the GPU")
    ax.legend(fontsize=8)


EXPERIMENT = Experiment(
    name="gpu",
    title="GPU results (CUDA backend)",
    reference="TVM (Chen et al., OSDI 2018) Sec. 6.1 GPU evaluation, Fig. 14; Relay (Roesch et al., "
              "arXiv:1904.08368v2) Sec. 5.2 vision inference, Fig. 6",
    quick_minutes=1.0,
    full_minutes=10.0,
    units=_units,
    measure=_measure,
    report=_report,
    available=_available,
)
