"""`--precision bf16` on `compile`, `run` and `tune`, through `search.cli.main` on the zoo's `mlp`:
no calibration needed, the layers the bf16 kernels run become bf16 layers, nothing falls back."""

from __future__ import annotations

import numpy as np
import pytest

from search.cli import main

pytestmark = pytest.mark.cpu


def test_precision_bf16_compiles_runs_and_tunes(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    common = ["--model", "mlp", "--db", url, "--threads", "1", "--precision", "bf16"]
    assert main(["run", *common, "--repeat", "2"]) == 0
    out, _ = capsys.readouterr()
    assert "precision bf16 (every layer the bf16 kernels run" in out and "median of 2 calls" in out
    assert main(["tune", *common, "--trials", "2"]) == 0
    out, _ = capsys.readouterr()
    assert "precision bf16" in out and "trials: 2 new" in out and "end to end:" in out
    assert main(["compile", *common]) == 0  # the tuned bf16 kernels apply
    out, _ = capsys.readouterr()
    assert "compiled mlp[bf16]" in out and "fallback" not in out
    assert out.count("dense_bf16 {") == 3 and "tuned" in out


def test_bf16_mlp_is_close_to_fp32():
    """The model `--precision bf16` builds, against the float model on the same input."""
    import argparse

    import autorelay
    from search.models import load_model
    from search.quantize_cli import apply_precision

    model = load_model("mlp")
    args = argparse.Namespace(precision="bf16", pipeline="default")
    bf16, _, _ = apply_precision(args, model, None, 1)
    exe = autorelay.build(bf16.mod, params=bf16.params)
    assert exe.report.fallbacks == []
    assert exe.report.sources  # every kernel compiled
    inputs = {k: np.asarray(v) for k, v in model.inputs.items()}
    got = np.asarray(exe.run(**inputs))
    fexe = autorelay.build(model.mod, params=model.params)
    want = np.asarray(fexe.run(**inputs))
    # three layers, each rounding its input and weight to 8-bit significands (see test_quantize_bf16)
    assert np.abs(got - want).max() <= 2 * 3 * 2.0 ** -8 * float(np.abs(want).max())
