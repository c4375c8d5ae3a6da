"""Whole models on the GPU runtime: `autorelay.build(..., target="cuda ...")` runs the graph
executor on device memory. Here the device is `cuda -device=emulated` (host memory, each kernel's
CPU emulation), so the runtime — device buffers, the static memory plan, views, copies at the
edges, host steps between device buffers — is checked against the CPU build and the reference
interpreter where no GPU exists; `test_cuda_driver.py` runs kernels on a real one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gpu_cases import driver_reason

import autorelay
from autorelay.codegen.nvptx.driver import NO_DRIVER, CudaDriverError
from autorelay.target import TargetError

EMULATED = "cuda -arch=sm_80 -device=emulated"
EXAMPLES = Path(autorelay.__file__).parent / "examples"


def _params(mod, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    fn = autorelay.infer_types(mod)["main"]
    return {p.name_hint: (rng.standard_normal(p.checked_type.concrete_shape) * 0.3).astype("float32")
            for p in fn.params[1:]}


def test_a_resnet_block_on_the_emulated_gpu_matches_the_cpu_build():
    mod = autorelay.parse((EXAMPLES / "resnet_block.relay").read_text())
    params = _params(mod)
    for k in ("bn1_var", "bn2_var"):
        params[k] = np.abs(params[k]) + 0.5
    x = np.random.default_rng(1).standard_normal((1, 16, 32, 32)).astype("float32")
    exe = autorelay.build(mod, target=EMULATED, params=params)
    want = autorelay.build(mod, target="llvm", params=params)(x)
    np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4)
    assert exe.pipeline == "gpu"  # direct convolutions: no Winograd split on the GPU
    assert all(r.kind == "kernel" for r in exe.report.rows)
    gpu_templates = {"cuda_injective", "cuda_reduction", "cuda_dense", "cuda_conv2d"}
    assert {r.detail.split()[0] for r in exe.report.rows} <= gpu_templates
    assert len(exe.report.rows) == 2  # conv+bn+relu and conv+bn+add+relu: fused
    again = exe(x + 1)  # buffers are reused across calls: a second call sees its own input
    np.testing.assert_allclose(again, autorelay.build(mod, target="llvm", params=params)(x + 1), rtol=1e-4,
                               atol=1e-4)


def test_a_classifier_head_reduces_across_threads_and_matches_the_cpu_build():
    """global_avg_pool2d and softmax over 1000 classes at batch 1: few outputs, long reductions,
    so `cuda_reduction` picks its cross-thread form (a block per output element) by default."""
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 64, 13, 13), float32], %w: Tensor[(1000, 64), float32]) {
  %0 = nn.global_avg_pool2d(%x);
  %1 = nn.batch_flatten(%0);
  %2 = nn.dense(%1, %w, units=1000);
  nn.softmax(%2, axis=-1)
}""")
    params = _params(mod, seed=6)
    x = np.random.default_rng(7).standard_normal((1, 64, 13, 13)).astype("float32")
    exe = autorelay.build(mod, target=EMULATED, params=params)
    np.testing.assert_allclose(exe(x), autorelay.build(mod, target="llvm", params=params)(x), rtol=1e-5,
                               atol=1e-6)
    rows = {r.name: r.detail for r in exe.report.rows}
    for name in ("global_avg_pool2d", "softmax"):
        assert rows[name].startswith("cuda_reduction") and "'reduce_threads': 0" not in rows[name], rows


def test_views_tuple_outputs_and_outputs_that_are_inputs_or_constants():
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 6), float32]) {
  %0 = exp(%x);
  %1 = reshape(%0, newshape=[3, 4]);
  %2 = nn.relu(%1);
  %3 = take(%0, 1, axis=0);
  (%2, %x, %1, reshape(%x, newshape=[12]), ones(shape=[3], dtype="float32"), add(%3, 1f), %3)
}""")
    x = np.random.default_rng(2).standard_normal((2, 6)).astype("float32")
    exe = autorelay.build(mod, target=EMULATED)
    got = exe(x)
    want = autorelay.evaluate(mod, x)
    assert len(got) == 7
    assert any(s.kind == "alias" and s.offset == 6 for s in exe.plan.slots)  # take(…, 1): row 1 in place
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6)


def test_a_host_step_between_device_buffers_is_reported():
    """argsort has no compute: it runs its NumPy reference on the host, between a copy from the
    device and one back, and the report lists it as a fallback."""
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(4, 9), float32]) {
  %0 = exp(sin(%x));
  %1 = argsort(%0, axis=1);
  add(cast(%1, dtype="float32"), %0)
}""")
    x = np.random.default_rng(3).standard_normal((4, 9)).astype("float32")
    exe = autorelay.build(mod, target=EMULATED)
    np.testing.assert_allclose(exe(x), autorelay.evaluate(mod, x), rtol=1e-6)
    assert [r.kind for r in exe.report.rows] == ["kernel", "fallback", "kernel"]
    assert [r.name for r in exe.report.fallbacks] == ["argsort"]
    prof = exe.profile(x, repeat=2)
    assert prof.total_seconds is not None and prof.total_seconds > 0
    assert exe.device_ms(x, repeat=2) > 0


def test_a_saved_gpu_executable_loads_and_runs_the_same_kernels(tmp_path):
    """The archive holds each kernel's PTX (and, emulated, its emulation's CPU code), launch shapes,
    the plan with its views, constants and host fallbacks; loading builds nothing."""
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(4, 9), float32]) {
  %0 = exp(sin(%x));
  %1 = argsort(%0, axis=1);
  (add(cast(%1, dtype="float32"), %0), nn.softmax(%0), take(%0, 2, axis=0))
}""")
    x = np.random.default_rng(6).standard_normal((4, 9)).astype("float32")
    exe = autorelay.build(mod, target=EMULATED)
    exe.save(tmp_path / "g.arx")
    back = autorelay.load(tmp_path / "g.arx")
    assert back.target == exe.target
    assert [r.kind for r in back.report.rows] == [r.kind for r in exe.report.rows]
    for got, want in zip(back(x), autorelay.evaluate(mod, x)):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6)


def test_gpu_builds_refuse_what_they_cannot_do_in_one_line():
    mod = autorelay.parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) { exp(%x) }')
    with pytest.raises(TargetError, match="graph executor"):
        autorelay.build(mod, target=EMULATED, executor="vm")
    with pytest.raises(TargetError, match="unknown device"):
        autorelay.build(mod, target="cuda -device=fpga")
    with pytest.raises(TypeError, match="only GPU"):
        autorelay.build(mod, target="llvm").device_ms(np.ones(4, np.float32))


def test_without_a_driver_a_gpu_build_says_so():
    if driver_reason() is None:
        pytest.skip("a CUDA driver is present on this machine")
    mod = autorelay.parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) { exp(%x) }')
    with pytest.raises(CudaDriverError, match=NO_DRIVER):
        autorelay.build(mod, target="cuda")


@pytest.mark.cuda
@pytest.mark.skipif(driver_reason() is not None, reason=driver_reason() or "")
def test_a_resnet_block_on_the_gpu_matches_the_cpu_build():
    mod = autorelay.parse((EXAMPLES / "resnet_block.relay").read_text())
    params = _params(mod, seed=4)
    for k in ("bn1_var", "bn2_var"):
        params[k] = np.abs(params[k]) + 0.5
    x = np.random.default_rng(5).standard_normal((1, 16, 32, 32)).astype("float32")
    exe = autorelay.build(mod, target="cuda", params=params)
    np.testing.assert_allclose(exe(x), autorelay.build(mod, target="llvm", params=params)(x), rtol=1e-4,
                               atol=1e-4)
    assert exe.device_ms(x, repeat=3) > 0


def test_tune_then_run_a_model_for_the_gpu_through_the_cli(tmp_path, capsys):
    """`autorelay tune --target cuda…` end to end on the emulated device: GPU tasks extracted
    (pipeline gpu), candidates built as PTX + emulation, timed, logged; `run` builds with them."""
    import tuning_db
    from search.cli import main

    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    common = ["--model", "mlp", "--db", url, "--target", EMULATED]
    assert main(["tune", *common, "--trials", "6", "--tuner", "random", "--no-compare"]) == 0
    out, _ = capsys.readouterr()
    assert "pipeline gpu" in out and "trials: 6 new" in out
    with tuning_db.open(url) as db:
        assert [r.status for r in db.runs()] == ["finished"]
    assert main(["run", *common, "--repeat", "2"]) == 0
    out, _ = capsys.readouterr()
    assert "tuned" in out and "cuda_dense" in out
    if driver_reason() is not None:  # the real GPU target: one clear line, no traceback
        assert main(["run", "--model", "mlp", "--db", url, "--target", "cuda"]) == 1
        _, err = capsys.readouterr()
        assert NO_DRIVER in err and "Traceback" not in err
