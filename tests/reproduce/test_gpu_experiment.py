"""The gpu experiment without a GPU: it says why in one line (listing and running), and its report
is drawn from stored rows alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from autorelay.codegen.nvptx import driver
from reproduce import Context, ReproduceError, run_experiment
from reproduce.experiments import gpu
from reproduce.machine import fingerprint


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise driver.CudaDriverError(f"{driver.NO_DRIVER} (libcuda.so.1 could not be loaded: test)")

    monkeypatch.setattr(driver, "_load_library", missing)


def test_without_a_driver_it_says_why_and_does_not_run(no_driver: None, ctx: Context) -> None:
    why = gpu.EXPERIMENT.available()
    assert why and why.startswith("no CUDA driver found") and "\n" not in why
    with pytest.raises(ReproduceError, match="gpu cannot run here: no CUDA driver found"):
        run_experiment(gpu.EXPERIMENT, ctx)


def test_the_command_prints_the_reason_not_a_traceback(no_driver: None, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from search.cli import main

    assert main(["reproduce", "gpu", "--quick", "--db", str(tmp_path / "x.db"), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "gpu cannot run here: no CUDA driver found" in err and "Traceback" not in err
    assert main(["reproduce", "--list"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("gpu ")]
    assert listed and "[cannot run here: no CUDA driver found" in listed[0]


def test_model_units_only_when_the_builder_builds_cuda_models(ctx: Context,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import reproduce.gpu_measure as gm

    why = gm.cuda_models_unsupported()
    assert why is None or "not supported" in why  # asked of autorelay.build itself, no GPU needed
    monkeypatch.setattr(gm, "cuda_models_unsupported", lambda: "models for cuda are not supported yet")
    keys = [u.key for u in gpu.EXPERIMENT.units(ctx)]
    assert keys == [*(f"sgemm {n}" for n in gpu.QUICK_SIZES), "mlp batch 64"]
    monkeypatch.setattr(gm, "cuda_models_unsupported", lambda: None)
    assert [u.key for u in gpu.EXPERIMENT.units(ctx)][-1] == "model resnet-18"


def test_report_from_stored_rows(no_driver: None, ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    import reproduce.gpu_measure as gm

    monkeypatch.setattr(gm, "cuda_models_unsupported", lambda: "models for cuda are not supported yet")
    here = fingerprint()
    target = "cuda -arch=sm_90"
    rows = {"sgemm 1024": {"kind": "sgemm", "target": target, "n": 1024, "default_gflops": 1000.0,
                           "best_gflops": 4000.0, "best_config": "{}", "sweep": 4, "cublas_gflops": 8000.0},
            "sgemm 512": {"kind": "sgemm", "target": target, "n": 512, "default_gflops": 500.0,
                          "best_gflops": 900.0, "best_config": "{}", "sweep": 4, "cublas_gflops": None},
            "mlp batch 64": {"kind": "mlp", "target": target, "batch": 64, "kernels": 4, "ms": 0.05,
                             "torch_ms": 0.1}}
    for unit, result in rows.items():
        ctx.db.store_experiment_result("gpu", ctx.mode, unit, here, result)
    summary = run_experiment(gpu.EXPERIMENT, ctx, replot=True)
    assert not summary.measured and {p.name for p in summary.files} == {"gpu.csv", "gpu.md", "gpu_sgemm.png"}
    md = (ctx.out_dir / "gpu.md").read_text()
    assert "| 512 | 500.0 | 900.0 | 4 | - | - |" in md  # sorted by n; no cuBLAS figure, no ratio
    assert "| 1024 | 1000.0 | 4000.0 | 4 | 8000.0 | 0.5 |" in md
    assert "| 64 | 4 | 0.0500 | 0.1000 | 2.0000 |" in md
    assert "No whole-model rows: models for cuda are not supported yet." in md
