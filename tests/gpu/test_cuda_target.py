"""cuda targets: resolution with device limits (documented defaults here, where no GPU is)."""

from __future__ import annotations

import pytest

from autorelay.codegen import backend_for, resolve_target
from autorelay.codegen.nvptx.device import ARCH_LIMITS, driver_limits
from autorelay.target import CUDA_LIMITS, Target, TargetError

NO_GPU = driver_limits(None) is None


@pytest.mark.skipif(not NO_GPU, reason="a GPU is present: its limits come from the driver")
def test_cuda_target_resolves_with_the_arch_defaults():
    t = resolve_target("cuda -arch=sm_90")
    assert t.kind == "cuda" and t.arch == "sm_90" and t.cpu == "sm_90"
    assert (t.max_threads_per_block, t.max_shared_memory_per_block, t.warp_size, t.registers_per_block) \
        == (1024, 48 * 1024, 32, 65536)
    assert str(t).startswith("cuda -arch=sm_90 -max_blocks_per_multiprocessor=32 ")
    assert "-max_shared_memory_per_block=49152" in str(t)
    assert resolve_target(str(t)) == t  # the printed form is the tuning-log key and round-trips
    assert t.threads == 1 and backend_for(t).kind == "cuda"


@pytest.mark.skipif(not NO_GPU, reason="a GPU is present: its limits come from the driver")
@pytest.mark.parametrize("arch, per_sm", [("sm_80", (2048, 32, 164 * 1024, 65536, 1024)),
                                          ("sm_90", (2048, 32, 228 * 1024, 65536, 1024)),
                                          ("sm_75", (1024, 16, 64 * 1024, 65536, 0))])
def test_cuda_targets_carry_the_multiprocessor_limits(arch, per_sm):
    """What occupancy is computed from (CUDA C Programming Guide, per compute capability)."""
    t = resolve_target(f"cuda -arch={arch}")
    names = ("max_threads_per_multiprocessor", "max_blocks_per_multiprocessor",
             "max_shared_memory_per_multiprocessor", "registers_per_multiprocessor",
             "reserved_shared_memory_per_block")
    assert tuple(t.limit(n) for n in names) == per_sm


def test_explicit_limits_override_and_change_the_key():
    t = resolve_target("cuda -arch=sm_80 -max_threads_per_block=512")
    assert t.max_threads_per_block == 512 and t.warp_size == 32
    assert t != resolve_target("cuda -arch=sm_80") and t.key() != resolve_target("cuda -arch=sm_80").key()


@pytest.mark.parametrize("text, match", [
    ("cuda -arch=sm_90a", "unknown architecture"),
    ("cuda -arch=sm_90 -frobnicate=1", "unknown option"),
    ("cuda -arch=sm_90 -warp_size=x", "positive integer"),
])
def test_bad_cuda_targets_name_the_bad_part(text, match):
    with pytest.raises(TargetError, match=match):
        resolve_target(text)


def test_limits_of_an_unresolved_cuda_target_are_an_error():
    with pytest.raises(TargetError, match="resolve it"):
        _ = Target(kind="cuda", options=(("arch", "sm_90"),)).max_threads_per_block
    assert all(set(CUDA_LIMITS) == set(v) for v in ARCH_LIMITS.values())


def test_model_tasks_for_cuda_use_the_gpu_templates():
    """Task extraction needs no GPU: a model's kernels become tasks over the GPU templates' spaces
    (built, timed and emulated elsewhere: `test_gpu_models.py`)."""
    from autorelay.frontend import zoo
    from search.extract import extract_tasks

    mod, params = zoo.get("mlp")
    tasks = extract_tasks(mod, params, "cuda -arch=sm_90", pipeline="gpu")
    assert tasks and {t.template for t in tasks} <= {"cuda_dense", "cuda_reduction", "cuda_injective"}
    assert all(t.target.kind == "cuda" for t in tasks)
