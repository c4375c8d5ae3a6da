"""`autorelay quantize` and `--precision` on `compile` / `run`, through `search.cli.main` on the zoo's
`mlp`: the front table, the plot, the stored pick that `--precision plan` builds, and one-line
errors for malformed calibration folders and for a plan that was never stored."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tuning_db
from autorelay.lower import model_key
from search.cli import main
from search.models import load_model

pytestmark = pytest.mark.cpu


def _folder(path, arrays: dict[str, np.ndarray]):
    path.mkdir()
    for name, arr in arrays.items():
        np.save(path / name, arr)
    return path


def test_quantize_then_compile_and_run_the_plan(tmp_path, capsys):
    rng = np.random.default_rng(0)
    calib = _folder(tmp_path / "calib", {"a.npy": rng.standard_normal((3, 784)).astype("float32")})
    valid = _folder(tmp_path / "valid", {"v0.npy": rng.standard_normal((4, 784)).astype("float32"),
                                         "v1.npy": rng.standard_normal((1, 784)),  # float64: cast
                                         "labels.npy": rng.integers(0, 10, 5)})
    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    plot = tmp_path / "front.png"
    common = ["--model", "mlp", "--db", url, "--threads", "1"]
    assert main(["quantize", *common, "--calibration", str(calib), "--validation", str(valid),
                 "--max-drop", "0.2", "--trials", "3", "--plot", str(plot)]) == 0
    out, err = capsys.readouterr()
    assert re.search(r"mlp on llvm .*: Pareto front of \d+ measured plans \(top-1; fp32 [\d.]+%", out)
    assert "* chosen:" in out and "stored in the log" in out and f"plot saved to {plot}" in out
    assert "sensitivity: int8 1/3: dense_0" in err  # progress lines on stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with tuning_db.open(url) as db:
        rows = db.plans(model_key(load_model("mlp").mod))
        (chosen,) = [r for r in rows if r.chosen]
        assert chosen.metric == "top1" and chosen.accuracy_drop <= 0.2 and chosen.calibration == "max"
        assert chosen.info["validation_samples"] == 5 and chosen.info["calibration_source"] == str(calib)
        # the table's rows are the stored rows: one line per front point with its latency
        for r in rows:
            assert f"{r.latency_ms:.4g}" in out

    assert main(["compile", *common, "--precision", "plan"]) == 0
    out, _ = capsys.readouterr()
    assert f"precision plan #{chosen.id} (top1 drop" in out and "compiled mlp[quantized]" in out
    assert f"the stored max calibration of {calib}" in out  # the ranges the plan was measured with

    assert main(["run", *common, "--precision", "int8", "--calibration-random", "2", "--repeat", "2"]) == 0
    out, _ = capsys.readouterr()
    assert "precision int8 (every quantizable layer" in out and "median of 2 calls" in out

    # another thread count is another target: no plan stored for it, said in one line
    assert main(["run", "--model", "mlp", "--db", url, "--threads", "2", "--precision", "plan"]) == 1
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "no quantization plan stored for mlp on llvm" in err
    assert "plans exist for llvm" in err and "-threads=1" in err
    # a bound no stored plan meets: said so, with the smallest stored drop
    least = min(r.accuracy_drop for r in rows)
    if least > 0:
        assert main(["run", *common, "--precision", "plan", "--max-drop", f"{least / 2:g}"]) == 1
        _, err = capsys.readouterr()
        assert f"lose more than --max-drop {least / 2:g}" in err and f"smallest drop is {least:.4g}" in err
    # options the precision would ignore are refused
    for extra in (["--precision", "bf16", "--calibration-random", "2"],
                  ["--precision", "fp32", "--method", "kl"], ["--precision", "int8", "--max-drop", "0.1"]):
        assert main(["run", *common, *extra]) == 1, extra
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and extra[2] in err and "--precision" in err, err
    with pytest.raises(SystemExit) as e:
        main(["compile", *common, "--precision", "plan", "--max-drop", "-1"])
    assert e.value.code == 2 and "--max-drop: must be a finite number >= 0" in capsys.readouterr().err
    # a log without plans: the same one-line error, without the hint
    fresh = str(tmp_path / "fresh.sqlite")
    assert main(["compile", "--model", "mlp", "--db", fresh, "--threads", "1", "--precision", "plan"]) == 1
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "no quantization plan stored for mlp" in err and "exist" not in err


@pytest.mark.parametrize("case", ["missing", "file", "empty", "junk", "shape", "strings", "labels", "mixed"])
def test_malformed_calibration_folder_is_one_line(tmp_path, capsys, case):
    folder = tmp_path / "calib"
    if case == "file":
        folder.write_text("x")
    elif case != "missing":
        folder.mkdir()
    if case == "junk":
        (folder / "a.npy").write_text("not numpy")
    elif case == "shape":
        np.save(folder / "a.npy", np.zeros((2, 100), "float32"))
    elif case == "strings":
        np.save(folder / "a.npy", np.array(["a"] * 784).reshape(1, 784))
    elif case == "labels":
        np.save(folder / "a.npy", np.zeros((2, 784), "float32"))
        np.save(folder / "labels.npy", np.zeros(3, "int64"))
    elif case == "mixed":
        np.save(folder / "a.npy", np.zeros((1, 784), "float32"))
        (folder / "input_0.pb").write_bytes(b"\x00")
    flag = "--validation" if case == "labels" else "--calibration"
    extra = ["--calibration-random", "1"] if case == "labels" else []
    code = main(["quantize", "--model", "mlp", *extra, flag, str(folder), "--max-drop", "0.1",
                 "--db", str(tmp_path / "log.sqlite")])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    what = "validation" if case == "labels" else "calibration"
    assert err.startswith(f"autorelay quantize: {what} folder {folder}: ") and err.count("\n") == 1
    expected = {"missing": "does not exist", "file": "is not a directory", "empty": "holds no .npy",
                "junk": "cannot read a.npy: not a NumPy",
                "shape": "a.npy has shape (2, 100), but input 'data'",
                "strings": "a.npy holds <U1 values", "labels": "labels.npy holds 3 labels for 2 samples",
                "mixed": "mixes .npy/.npz files with ONNX"}[case]
    assert expected in err


def test_onnx_test_data_folder(tmp_path):
    """input_K.pb tensors, in test_data_set_* folders (as the ONNX model zoo ships them)."""
    pytest.importorskip("onnx")
    from onnx import numpy_helper

    from search.quant_data import load_folder

    model = load_model("mlp")
    rng = np.random.default_rng(1)
    want = [rng.standard_normal((1, 784)).astype("float32") for _ in range(2)]
    for i, arr in enumerate(want):
        d = tmp_path / f"test_data_set_{i}"
        d.mkdir()
        (d / "input_0.pb").write_bytes(numpy_helper.from_array(arr).SerializeToString())
    data = load_folder(tmp_path, model)
    assert len(data.batches) == 2
    for got, arr in zip(data.batches, want):
        np.testing.assert_array_equal(got["data"], arr)
    (tmp_path / "test_data_set_1" / "input_0.pb").write_bytes(b"\xff\xff\xff")
    with pytest.raises(ValueError, match=r"^calibration folder .*: cannot read test_data_set_1/input_0.pb"):
        load_folder(tmp_path, model)


def test_tune_int8_then_compile_uses_the_tuned_int8_kernels(tmp_path, capsys):
    """`tune --precision int8` logs the quantized model's kernels; `compile --precision int8` with the
    same calibration builds the same model and finds them."""
    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    common = ["--model", "mlp", "--db", url, "--threads", "1", "--precision", "int8", "--calibration-random",
              "2", "--pipeline", "default"]
    assert main(["tune", *common, "--trials", "6", "--no-compare"]) == 0
    out, _ = capsys.readouterr()
    assert "precision int8" in out and "dense" in out
    assert main(["compile", *common]) == 0
    out, _ = capsys.readouterr()
    assert "compiled mlp[quantized]" in out and re.search(r"kernels by source: .*tuned \d+", out), out


def test_quantize_on_the_stored_layout_plan_then_build_it(tmp_path, capsys):
    """With a layout plan in the log, `quantize` measures every precision plan on it, `db plan` shows
    the pick per layer, and `compile --precision plan` builds the quantized model on that plan's
    layouts (the int8 convolutions blocked)."""
    from autorelay.transform.layout_plan import LayoutPlan, conv_layers
    from search.models import tuning_target

    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    model = load_model("nature-dqn")
    layers = conv_layers(model.mod)
    plan = LayoutPlan(dict(zip(layers, (0, 8, 16))))
    rows = [{"layer": n, "block": b} for n, b in plan.blocks.items()]  # what `db plan` tabulates
    with tuning_db.open(url) as db:
        db.store_layout_plan(model_key(model.mod), tuning_target("llvm", 1), plan.to_dict(), latency_ms=1.0,
                             model="nature-dqn", chosen=True, info={"winner": "plan", "layers": rows})
    common = ["--model", "nature-dqn", "--db", url, "--threads", "1"]
    assert main(["quantize", *common, "--calibration-random", "2", "--max-drop", "1", "--trials", "2"]) == 0
    _, err = capsys.readouterr()
    assert "pipeline plan (layout plan #1 from the log)" in err
    with tuning_db.open(url) as db:
        pick = db.best_plan(model_key(model.mod), tuning_target("llvm", 1))
    assert pick is not None and pick.info["layout_plan"] == plan.to_dict()
    assert main(["db", "plan", "--db", url, "--model", "nature-dqn"]) == 0
    out, _ = capsys.readouterr()
    assert f"precision plan #{pick.id} measured on this layout plan" in out
    table = [line.split() for line in out.splitlines() if line.startswith("conv2d_")]
    precisions = {row[0]: row[-1] for row in table}
    assert precisions == {n: pick.plan.get("precisions", {}).get(n, pick.plan.get("default", "int8"))
                          for n in layers}
    assert main(["compile", *common, "--precision", "plan"]) == 0
    out, _ = capsys.readouterr()
    assert "on the stored layout plan" in out and "(pipeline plan)" in out
