"""Task extraction from zoo models: counts, deduplication, FLOP shares, and that the keys are the
ones `autorelay.build` asks the tuning log about.

Oracles: ResNet-18's architecture (20 convolutions, one dense layer; the second block of stages
2-4 repeats its shapes; the 13 stride-1 3x3 convolutions run as Winograd F(2x2, 3x3), the
stem, the stride-2 and the 1x1 ones directly) and the textbook FLOP counts: 2·N·K·C/groups·R·S·OH·OW
for a direct convolution (a fused bias/ReLU epilogue adds a few operations per output element on
top), 2·16·K·C·tiles for the 16 GEMMs of a Winograd one (its transforms add a few percent).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import autorelay
from autorelay.frontend import zoo
from autorelay.schedule.source import Lookup
from search import extract_tasks
from search.extract import ModelTask, extract_all

pytestmark = pytest.mark.cpu


@pytest.fixture(scope="module")
def resnet():
    mod, params = zoo.get("resnet-18", image_size=224)  # every 3x3 map >= 7 pixels: all take Winograd
    return mod, params, extract_all(mod, params)


def _weight(workload: dict) -> list[int]:
    """The OIHW weight among the inputs: the only 4-D input whose first dim is not the batch (1)."""
    (w,) = [s for s in workload["shapes"][:-1] if len(s) == 4 and s[0] != 1]
    return w


def _conv_flops(workload: dict) -> float:
    """2 * N*K*OH*OW * (C/groups)*R*S from the workload's weight and output shapes."""
    k, cg, r, s = _weight(workload)
    n, k_out, oh, ow = workload["shapes"][-1]
    assert k_out == k
    return 2.0 * n * k * oh * ow * cg * r * s


CONVS = ("nn.conv2d", "nn.conv2d_winograd")


def test_resnet18_counts_and_dedup(resnet):
    _, _, ex = resnet
    convs = [t for t in ex.tasks if t.workload["family"] in CONVS]
    dense = [t for t in ex.tasks if t.workload["family"] == "nn.dense"]
    assert sum(t.count for t in convs) == 20  # 1 stem + 16 in the basic blocks + 3 downsampling 1x1
    winograd = [t for t in convs if t.workload["family"] == "nn.conv2d_winograd"]
    assert sum(t.count for t in winograd) == 13  # the 3x3 stride-1 ones
    assert [t.count for t in dense] == [1]
    assert len({t.key for t in ex.tasks}) == len(ex.tasks)  # one task per distinct workload
    # stage 1: both blocks are alike, two 3x3 workloads (with and without the residual add) twice
    # each; stages 2-4: only the residual 3x3 conv repeats (the other second-block conv fuses just a
    # ReLU, the first block's convs downsample): 1 + 2 + 3 * 4 distinct convolutions
    assert len(convs) == 15
    repeated = [t for t in convs if t.count == 2]
    assert len(repeated) == 5
    assert all(t.workload["family"] == "nn.conv2d_winograd" for t in repeated)
    # kernels with no tunable template are reported, not dropped silently
    assert [s.name for s in ex.skipped] == ["batch_flatten"]
    assert all(isinstance(t, ModelTask) and len(t.space) > 1 for t in ex.tasks)


def test_resnet18_flops_and_shares(resnet):
    _, _, ex = resnet
    for t in ex.tasks:
        if t.workload["family"] == "nn.conv2d_winograd":
            u = max((s for s in t.workload["shapes"][:-1] if len(s) == 3), key=np.prod)  # [P, K, C]
            _, _, oh, ow = t.workload["shapes"][-1]
            m = {16: 2, 36: 4}[u[0]]  # the output tile edge
            gemms = 2.0 * u[0] * u[1] * u[2] * -(-oh // m) * -(-ow // m)
            assert gemms <= t.flops <= 1.25 * gemms, t.name
        elif t.workload["family"] == "nn.conv2d":
            want = _conv_flops(t.workload)
            out_elems = float(np.prod(t.workload["shapes"][-1]))
            assert want <= t.flops <= want + 4 * out_elems, t.name
    assert all(abs(t.flop_share - t.flops * t.count / ex.total_flops) < 1e-12 for t in ex.tasks)
    total_share = sum(t.flop_share for t in ex.tasks)
    assert 0.999 < total_share <= 1.0 + 1e-9  # only batch_flatten (0 FLOPs) is left out
    convs = sum(t.flop_share for t in ex.tasks if t.workload["family"] in CONVS)
    assert convs > 0.9  # a CNN's FLOPs are its convolutions


def test_task_keys_are_the_build_lookup_keys(resnet):
    mod, params, ex = resnet
    asked: list[tuple[str, dict | None]] = []

    class Spy:
        def lookup(self, key, target, workload=None):
            asked.append((key, workload))
            return Lookup(None)

    autorelay.build(mod, "llvm", params, schedules=Spy())
    keys = {k for k, _ in asked}
    assert {t.key for t in ex.tasks} <= keys
    described = dict(asked)
    assert all(described[t.key] == t.workload for t in ex.tasks)


def test_mlp_dense_tasks_and_pickle():
    mod, params = zoo.get("mlp")
    tasks = extract_tasks(mod, params)
    dense = [t for t in tasks if t.workload["family"] == "nn.dense"]
    assert len(dense) == 3
    for t in dense:
        (m, k), (n, k2) = t.workload["shapes"][0], t.workload["shapes"][1]
        assert k == k2
        assert 2 * m * n * k <= t.flops <= 2 * m * n * k + 3 * m * n
    back = pickle.loads(pickle.dumps(dense[0]))  # tasks travel to measurement workers
    assert (back.key, back.count, back.flop_share) == (dense[0].key, 1, dense[0].flop_share)


def test_threads_change_the_tuning_target():
    mod, params = zoo.get("mlp")
    one = extract_tasks(mod, params, threads=1)[0]
    two = extract_tasks(mod, params, threads=2)[0]
    assert one.key == two.key and str(one.target) != str(two.target)


def test_bad_target_is_named():
    mod, params = zoo.get("mlp")
    with pytest.raises(ValueError, match="unknown kind 'opencl'"):
        extract_tasks(mod, params, "opencl")


def test_bound_source_transfers_only_within_a_template(tmp_path):
    """The log answers build's lookups under the tuning target; a neighbour's config is transferred
    to a conv of the same template, never to a depthwise conv (same op family, other template)."""
    import tuning_db
    from search.extract import BoundSource

    mod, params = zoo.get("mobilenet-v2", image_size=32)
    tasks = extract_tasks(mod, params)
    regular = [t for t in tasks if t.template == "conv2d_1x1_nchw"]
    depthwise = [t for t in tasks if t.template == "depthwise_conv2d_nchw"]
    donor, other = regular[0], regular[1]
    with tuning_db.open(f"sqlite:///{tmp_path / 'log.db'}") as db:
        db.record(donor.key, str(donor.target), donor.default.to_json(), [1e-4], workload=donor.workload)
        src = BoundSource(db, str(donor.target), tasks)
        got = src.lookup(donor.key, "llvm", workload=donor.workload)
        assert (got.config, got.kind) == (donor.default.to_json(), "exact")
        got = src.lookup(other.key, "llvm", workload=other.workload)
        assert (got.config, got.kind) == (donor.default.to_json(), "transferred")
        got = src.lookup(depthwise[0].key, "llvm", workload=depthwise[0].workload)
        assert (got.config, got.kind) == (None, "default")
        exe = autorelay.build(mod, "llvm", params, schedules=src)
    assert exe.report.sources["tuned"] == 1 and exe.report.sources["transferred"] >= 1
    inputs = zoo.random_inputs(mod, params)
    want = np.asarray(autorelay.evaluate(mod, *[inputs.get(p.name_hint, params.get(p.name_hint))
                                                for p in mod["main"].params]))
    got = np.asarray(exe.run(**inputs))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(float(np.abs(want).max()), 1e-3))
