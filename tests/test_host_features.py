"""Code compiled for a CPU this host cannot run is refused with a clear error, never run.

Running it would die of SIGILL on the first wide instruction, killing the process (a tuner, a test
worker) without a word. Compiling for another CPU stays allowed: only running is refused.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import (
    NAMED_CPUS,
    host_supports,
    host_target,
    missing_features,
    require_host_supports,
)
from autorelay.kernel import compile_kernel
from autorelay.target import TargetError
from autorelay.te import tensor as te

pytestmark = pytest.mark.cpu


def _unrunnable_named_cpu() -> str:
    """A named CPU whose code this host cannot run (skips on a host that runs them all)."""
    for cpu in NAMED_CPUS:
        if not host_supports(resolve_target(f"llvm -mcpu={cpu}")):
            return cpu
    pytest.skip(f"this host ({host_target().cpu}) runs the code of every named CPU")


def test_the_host_runs_its_own_code_and_lacks_an_unknown_feature():
    host = host_target()
    assert missing_features(host) == () and host_supports(host)
    foreign = dataclasses.replace(host, features=host.features + ",+no-such-feature")
    assert missing_features(foreign) == ("no-such-feature",)
    with pytest.raises(TargetError, match=r"this kernel targets .* needs no-such-feature; this host"):
        require_host_supports(foreign, "this kernel")


def test_a_kernel_for_a_cpu_the_host_lacks_compiles_but_does_not_run():
    cpu = _unrunnable_named_cpu()
    target = resolve_target(f"llvm -mcpu={cpu}")
    x = te.placeholder((64,), name="X")
    y = te.compute((64,), lambda i: x[i] * 2.0, name="Y")
    kernel = compile_kernel(te.make_def([x], y), None, target)  # compiling for it is fine
    with pytest.raises(TargetError, match=f"kernel .* targets -mcpu={cpu}, whose code needs"):
        kernel.run(np.ones(64, np.float32))


def test_a_model_built_for_a_cpu_the_host_lacks_does_not_run():
    from autorelay import build
    from autorelay.text_format import parse

    cpu = _unrunnable_named_cpu()
    mod = parse("def @main(%x: Tensor[(4, 8), float32]) { nn.relu(%x) }")
    exe = build(mod, target=f"llvm -mcpu={cpu}")
    with pytest.raises(TargetError, match="this executable targets"):
        exe(np.ones((4, 8), np.float32))


def test_tuning_for_a_cpu_the_host_lacks_is_refused_before_any_candidate():
    from search.model_tuning import tune_model
    from search.models import load_model

    cpu = _unrunnable_named_cpu()
    with pytest.raises(TargetError, match=r"tuning \(candidates are timed on this host\) targets"):
        tune_model(load_model("mlp"), trials=4, db="sqlite://", target=f"llvm -mcpu={cpu}")


def _saved_relu(tmp_path, target: str):
    from autorelay import build
    from autorelay.text_format import parse

    mod = parse("def @main(%x: Tensor[(4, 8), float32]) { nn.relu(%x) }")
    path = tmp_path / "relu.zip"
    build(mod, target=target).save(str(path))  # saving code for another CPU needs no run
    return path


def test_an_executable_saved_for_another_cpu_the_host_runs_loads_and_runs(tmp_path):
    from autorelay import load

    exe = load(str(_saved_relu(tmp_path, "llvm -mcpu=haswell")))  # AVX2: every host of the suite has it
    x = np.random.default_rng(0).standard_normal((4, 8)).astype("float32")
    np.testing.assert_array_equal(exe(x), np.maximum(x, 0))


def test_an_executable_saved_for_a_cpu_the_host_lacks_is_refused_at_load(tmp_path):
    from autorelay import load

    cpu = _unrunnable_named_cpu()
    path = _saved_relu(tmp_path, f"llvm -mcpu={cpu}")
    with pytest.raises(TargetError, match=f"load: .*relu.zip targets -mcpu={cpu}, whose code needs"):
        load(str(path))
