"""The `autorelay tune / compile / run` commands: smoke tests through `search.cli.main` on the
smallest zoo model, and one run of the installed `autorelay` console script in a subprocess."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tuning_db
from search.cli import main

pytestmark = pytest.mark.cpu


def test_tune_then_compile_then_run(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    common = ["--model", "mlp", "--db", url, "--threads", "1"]
    assert main(["tune", *common, "--trials", "4", "--tuner", "random", "--no-compare"]) == 0
    out, err = capsys.readouterr()
    assert re.search(r"trials: 4 new, 4 logged in all \(budget 4\)", out)
    assert "speedup" in out and "dense_bias_add_relu" in out
    assert "trials 4/4" in err  # progress lines go to stderr (plain lines: not a terminal)
    with tuning_db.open(url) as db:
        assert db.stats()  # something was logged
        assert [r.status for r in db.runs()] == ["finished"]

    saved = tmp_path / "mlp.exe"
    assert main(["compile", *common, "-o", str(saved)]) == 0
    out, _ = capsys.readouterr()
    assert re.search(r"kernels by source: .*tuned [1-9]", out)
    assert saved.exists() and saved.stat().st_size > 0

    assert main(["run", *common, "--repeat", "3"]) == 0
    out, _ = capsys.readouterr()
    assert re.search(r"mlp: built in [\d.]+ s; first call [\d.]+ ms, median of 3 calls [\d.]+ ms", out)
    assert "tuned" in out  # the kernel report names each kernel's schedule source


def test_a_kernel_cache_folder_serves_every_kernel_of_the_next_process(tmp_path, capsys):
    """`run --kernel-cache DIR` files each kernel's LLVM IR and compiled object; `compile` in a
    new process, with the backend's emitter forbidden, builds the model from the folder alone."""
    import sys

    folder = tmp_path / "kernels"
    args = ["--model", "mlp", "--db", f"sqlite:///{tmp_path / 'empty.db'}", "--threads", "1",
            "--pipeline", "default", "--kernel-cache", str(folder)]
    assert main(["run", *args, "--repeat", "1"]) == 0
    capsys.readouterr()
    codes, objects = list(folder.glob("*.ll.json")), list(folder.glob("*.o"))
    assert codes and len(objects) == len(codes)
    script = ("import sys\n"
              "from autorelay.codegen.llvm.backend import LLVMBackend\n"
              "def refuse(*a):\n"
              "    raise RuntimeError('emitted a kernel the folder holds')\n"
              "LLVMBackend.emit = refuse\n"
              "from search.cli import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", script, "compile", *args], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "compiled mlp" in done.stdout


def test_run_segments_times_each_loop_nest_of_a_kernel(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    assert main(["run", "--model", "resnet-18", "--image-size", "32", "--pipeline", "default",
                 "--threads", "1", "--repeat", "1", "--segments", "--db", url]) == 0
    out = capsys.readouterr().out
    nests = out.split("kernels run as several loop nests")[1].strip().splitlines()[1:]
    # the stem, reading the model's input, copies it padded first, then computes (the later convs
    # read their inputs already bordered: `autorelay.te.halo`); each nest has a time
    assert any(re.search(r"conv2d\S* +s0_\S*pad [\d.]+, s1_\S+ [\d.]+$", line) for line in nests), nests
    # a Winograd layer runs its input transform, its products and its output transform in turn
    assert any(re.search(r"winograd\S* +s0_\S+ [\d.]+, s1_\S+ [\d.]+, s2_\S+ [\d.]+$", line)
               for line in nests), nests


def test_bad_model_and_tuner_are_reported(capsys, tmp_path):
    assert main(["run", "--model", "resnet-7"]) == 1
    _, err = capsys.readouterr()
    assert "unknown model 'resnet-7'" in err and "resnet-18" in err
    assert main(["run", "--model", str(tmp_path / "missing.onnx")]) == 1
    _, err = capsys.readouterr()
    assert "missing.onnx" in err and "does not exist" in err
    with pytest.raises(SystemExit) as e:
        main(["tune", "--model", "mlp", "--trials", "4", "--tuner", "annealing"])
    assert e.value.code == 2
    assert main(["run", "--model", "mlp", "--image-size", "32"]) == 1
    _, err = capsys.readouterr()
    assert "mlp" in err and "image size" in err


def test_paths_and_pipeline_names_are_refused_before_the_build(tmp_path, capsys, monkeypatch):
    """An output path that cannot be written, a kernel cache that is a file and a pipeline that does
    not exist are each refused with a line that names them, and no model is built first."""
    import search.models

    def no_build(*a, **k):
        raise AssertionError("built before checking the command line")

    monkeypatch.setattr(search.models, "compile_model", no_build)
    common = ["compile", "--model", "mlp", "--db", f"sqlite:///{tmp_path / 'log.db'}"]
    assert main([*common, "-o", str(tmp_path)]) == 1
    assert f"--output: {tmp_path} is a folder" in capsys.readouterr().err
    assert main([*common, "-o", str(tmp_path / "missing" / "mlp.exe")]) == 1
    assert f"the folder {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for bad, said in ((["--kernel-cache", str(a_file)], f"{a_file} is a file, not a folder"),
                      (["--pipeline", "bogus"], "unknown pipeline 'bogus'; choose auto or plan")):
        with pytest.raises(SystemExit) as e:
            main([*common, *bad])
        err = capsys.readouterr().err
        assert e.value.code == 2 and said in err
    assert "tune" not in err.split("pass pipeline:")[1]  # the old name is accepted, not offered


def test_console_script_runs_a_model():
    exe = shutil.which("autorelay")
    if exe is None:
        pytest.skip("the autorelay console script is not installed (pip install -e .)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([exe, "run", "--model", "mlp", "--threads", "1", "--repeat", "2"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "median of 2 calls" in proc.stdout and "kernels by source: default" in proc.stdout


def test_ctrl_c_stops_cleanly_and_the_rerun_resumes(tmp_path, capsys):
    """A real SIGINT to the console script mid-tune: exit status 130, the partial table, every
    finished measurement in the log, the run marked interrupted; rerunning continues from there."""
    exe = shutil.which("autorelay")
    if exe is None:
        pytest.skip("the autorelay console script is not installed (pip install -e .)")
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    args = ["tune", "--model", "mlp", "--db", url, "--threads", "1", "--tuner", "random"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([exe, *args, "--trials", "400"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in proc.stderr:  # plain progress lines: stderr is a pipe, not a terminal
            m = re.search(r"trials (\d+)/400", line)
            if m and int(m.group(1)) >= 8:  # the event: at least 8 finished trials (any space size)
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, f"stdout:\n{out[-2000:]}\nstderr:\n{err[-3000:]}"
    assert "interrupted: every finished measurement is in the log" in out
    with tuning_db.open(url) as db:
        (run,) = db.runs()
        assert run.status == "interrupted"
        logged = run.measurements
    assert logged >= 8
    assert main([*args, "--trials", str(logged + 4), "--no-compare"]) == 0
    out, _ = capsys.readouterr()
    assert f"trials: 4 new, {logged + 4} logged in all" in out


def test_batch_runs_the_zoo_model_at_that_batch(tmp_path, capsys):
    from search.models import build_model, load_model

    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    args = ["--model", "mlp", "--batch", "4", "--db", url, "--threads", "1", "--repeat", "2"]
    assert main(["run", *args]) == 0
    out, _ = capsys.readouterr()
    assert "mlp:b4: built in" in out
    batched, single = load_model("mlp", batch_size=4), load_model("mlp")
    (x,) = batched.inputs.values()
    assert x.shape[0] == 4
    got = np.asarray(build_model(batched, threads=1)(x))
    one = build_model(single, threads=1)
    for i in range(4):  # each row of the batch is an independent sample
        np.testing.assert_allclose(got[i:i + 1], np.asarray(one(x[i:i + 1])), rtol=1e-5, atol=1e-6)
    assert main(["run", "--model", str(tmp_path / "m.onnx"), "--image-size", "32"]) == 1
    _, err = capsys.readouterr()
    assert "--image-size" in err and "ONNX" in err


def test_run_an_onnx_file(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from search.models import load_model, run_model

    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 32)).astype("float32")
    b = rng.standard_normal(16).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    path = tmp_path / "gemm_relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))

    assert main(["run", "--model", str(path), "--threads", "1", "--repeat", "2"]) == 0
    out, err = capsys.readouterr()
    assert "gemm_relu.onnx: built in" in out and "dense" in out
    assert "fallback" not in out + err
    model = load_model(str(path))
    res = run_model(model, threads=1, repeat=1)
    want = np.maximum(model.inputs["x"] @ w.T + b, 0)
    np.testing.assert_allclose(res.outputs, want, rtol=1e-5, atol=1e-5)


def test_an_onnx_file_with_a_symbolic_batch_runs_at_the_batch_asked(tmp_path, capsys):
    """A symbolic batch axis becomes --batch (default 1); another symbolic extent is refused by
    name, as is a --batch against a batch the file fixes."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from search.models import load_model, run_model

    def save(name: str, dims: list) -> str:
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / name))
        return str(tmp_path / name)

    path = save("dyn.onnx", ["batch", 3, 5])
    for batch in (1, 3):
        model = load_model(path, batch_size=batch)
        assert model.inputs["x"].shape == (batch, 3, 5)
        res = run_model(model, threads=1, repeat=1)
        np.testing.assert_array_equal(res.outputs, np.maximum(model.inputs["x"], 0))
    assert main(["run", "--model", path, "--threads", "1", "--repeat", "1", "--batch", "2"]) == 0
    assert "dyn.onnx:b2: built in" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"symbolic extents \(seq\)"):
        load_model(save("seq.onnx", ["batch", "seq", 5]))
    with pytest.raises(ValueError, match="fixes the batch"):
        load_model(save("fixed.onnx", [4, 3, 5]), batch_size=2)


def test_run_warns_when_kernels_fall_back_to_numpy(tmp_path, capsys):
    """TopK has no compute: its kernel runs on the NumPy reference, and `run` says so."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("TopK", ["r", "k"], ["y", "i"], axis=1)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)],
        initializer=[numpy_helper.from_array(np.array([3], "int64"), "k")])
    path = tmp_path / "topk.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    args = ["--model", str(path), "--threads", "1", "--repeat", "1", "--pipeline", "default"]
    assert main(["run", *args]) == 0
    out, err = capsys.readouterr()
    assert "fallback" in out  # the report's row
    (line,) = [x for x in err.splitlines() if "warning" in x]
    assert "1 kernel(s) run through the NumPy fallback" in line and "topk" in line
