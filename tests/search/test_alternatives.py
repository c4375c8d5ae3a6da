"""Alternative schedule templates of one workload: extraction makes a task per template under the
workload's one key, the scheduler counts the workload once, the build applies whichever template's
config the log holds as the best, and transfers are checked against the config's own template.

Oracles: the Nature DQN's structure (three convolutions of distinct shapes, two dense layers, a
flatten that is a view), which templates claim what (`template_choices`: a groups-1 conv2d on cuda
is both the direct `cuda_conv2d` and the implicit GEMM; a dense, a CPU conv or dense has one), and
hand-written logs whose best record is known. No GPU: extraction and the schedule choice only read
the target's documented limits; the chosen config is emitted as PTX, never run.
"""

from __future__ import annotations

import pytest

import tuning_db
from autorelay.codegen import resolve_target
from autorelay.errors import ScheduleError
from autorelay.frontend import zoo
from autorelay.kernel import emit_kernel
from autorelay.lower import lower, workload_key
from autorelay.primitive import choose_schedule
from autorelay.schedule.templates import check_in_space, template_choices
from search.extract import BoundSource, extract_all, optimize, primitive_calls, workload_share
from search.measure.result import MeasureResult
from search.scheduler import TaskScheduler
from search.tune import _logged_pick
from search.tuners import make_tuner

pytestmark = pytest.mark.cpu

SM80 = "cuda -arch=sm_80"
DIRECT, IGEMM = "cuda_conv2d", "cuda_conv2d_igemm"


@pytest.fixture(scope="module")
def dqn():
    return zoo.get("nature-dqn")


@pytest.fixture(scope="module")
def dqn_cuda(dqn):
    mod, params = dqn
    fused = optimize(mod, params, "gpu")
    return fused, extract_all(mod, params, SM80, pipeline="gpu")


def _by_key(tasks):
    out = {}
    for t in tasks:
        out.setdefault(t.key, []).append(t)
    return out


def test_a_cuda_conv_gets_a_task_per_template_under_one_key(dqn_cuda):
    _, ex = dqn_cuda
    groups = _by_key(ex.tasks)
    convs = {k: g for k, g in groups.items() if g[0].workload["family"] == "nn.conv2d"}
    dense = {k: g for k, g in groups.items() if g[0].workload["family"] == "nn.dense"}
    assert len(convs) == 3 and len(dense) == 2  # the DQN's three convolutions and two dense layers
    for g in convs.values():
        assert [t.template for t in g] == [DIRECT, IGEMM]  # the build's default first
        assert len({t.name for t in g}) == 2 and all(t.name.endswith("@" + t.template) for t in g)
        assert len({(t.count, t.flop_share, t.flops, t.key) for t in g}) == 1  # the workload's figures
        assert all(len(t.space) > 1 for t in g)
        assert g[0].default != g[1].default and g[1].default.template == IGEMM
    for g in dense.values():
        assert [t.template for t in g] == ["cuda_dense"] and "@" not in g[0].name
    # alternatives share their workload's share: summed per task it would pass 100%
    assert sum(t.flop_share for t in ex.tasks) > 1.0
    assert 0.99 < workload_share(ex.tasks) <= 1.0 + 1e-9
    names = [t.name for t in ex.tasks]
    assert len(set(names)) == len(names)


def test_cpu_extraction_is_one_task_per_workload(dqn):
    """On the CPU every conv and dense has one claiming template: as many tasks as the model has
    tunable distinct kernels (3 convolutions + 2 dense layers), none of them suffixed."""
    mod, params = dqn
    ex = extract_all(mod, params, "llvm")
    assert len(ex.tasks) == 3 + 2 == len({t.key for t in ex.tasks})
    assert all("@" not in t.name for t in ex.tasks)
    target = resolve_target("llvm")
    for fn in primitive_calls(optimize(mod, params)):
        if workload_key(fn) in {t.key for t in ex.tasks}:
            assert len(template_choices(lower(fn).cdef, target)) == 1
    mlp = extract_all(*zoo.get("mlp"), "llvm")
    assert [t.template for t in mlp.tasks] == ["dense"] * 3 + ["reduction"]  # 3 layers, softmax


def _simulate(sched: TaskScheduler, floor: list[float]) -> list[int]:
    """Task i's best latency falls towards floor[i] as trials accrue (deterministic)."""
    spent = [0] * len(floor)

    def tune_round(i: int, n: int) -> tuple[int, float]:
        spent[i] += n
        return n, floor[i] * (1.0 + 4.0 / spent[i] ** 0.5)

    return sched.run(tune_round)


def test_ungrouped_scheduling_is_unchanged():
    weights, floor = [2, 1, 3], [1e-3, 4e-3, 5e-4]
    plain = TaskScheduler(weights, 400, 16, seed=1)
    grouped = TaskScheduler(weights, 400, 16, seed=1, groups=["a", "b", "c"])
    assert _simulate(plain, floor) == _simulate(grouped, floor) and plain.order == grouped.order


def test_alternatives_share_their_workload_term():
    sched = TaskScheduler([3, 3, 3], 0, 16, groups=["conv", "conv", "dense"])
    for i, g in enumerate([2e-3, 1e-3, 4e-3]):
        sched.tasks[i].trials.append(16)
        sched.tasks[i].best.append(g)
    assert sched.objective() == pytest.approx(3 * 1e-3 + 3 * 4e-3)  # the conv once, at its best
    lead, trail = sched.gradient(1), sched.gradient(0)
    assert lead == pytest.approx(3 * (1 - 0.2) * -1e-3 / 16)  # the leader: a task of its own
    # the trailer may gain below the leader only what its projected round brings it there
    assert lead < trail <= 0.0
    sched.tasks[0].trials.append(320)
    sched.tasks[0].best.append(2e-3)
    assert sched.gradient(0) == 0.0  # far behind after many trials: left to the epsilon picks
    with pytest.raises(ValueError, match="same weight"):
        TaskScheduler([1, 2], 10, groups=["k", "k"])


def test_a_trailing_alternative_does_not_double_its_workloads_budget():
    """Two alternatives of one conv (the second 3x slower at best) and a dense of the same weight:
    the leader gets the larger part of the conv's trials, the trailer at least its warm-up, and the
    conv as a whole not much more than the dense (as separate kernels, it would have taken most)."""
    sched = TaskScheduler([2, 2, 2], 960, 16, seed=0, groups=["conv", "conv", "dense"])
    direct, igemm, dense = _simulate(sched, [3e-3, 1e-3, 1e-3])
    assert direct >= 16 and igemm > 2 * direct
    assert direct + igemm < 1.5 * dense
    alone = _simulate(TaskScheduler([2, 2, 2], 960, 16, seed=0), [3e-3, 1e-3, 1e-3])
    assert alone[0] + alone[1] > 2 * alone[2]  # as separate kernels they would have taken most
    sched = TaskScheduler([2, 2, 2], 960, 16, seed=0, groups=["conv", "conv", "dense"])
    direct, igemm, dense = _simulate(sched, [1e-3, 3e-3, 1e-3])  # the default template leads
    assert igemm >= 16 and direct > 2 * igemm


def test_a_deferred_alternative_waits_for_its_group_but_not_for_ever():
    """A deferred form (screened far behind) skips the warm-up: with no epsilon picks it starts only
    once the other form of its layers is finished; with them, it gets a few rounds and its leader
    keeps the bulk; a deferred task alone in its group (a kernel the plan may not run) waits for
    every undeferred task."""
    rounds: list[int] = []
    left = {"lead": 3}  # the leader's space runs out after three rounds

    def tune_round(i: int, n: int) -> tuple[int, float]:
        rounds.append(i)
        if i == 0:
            left["lead"] -= 1
            return (n, 1e-3) if left["lead"] >= 0 else (0, 1e-3)
        return n, 2e-3

    sched = TaskScheduler([1, 1, 1], 16 * 12, 16, epsilon=0.0, groups=["conv", "conv", "pool"], deferred=[1])
    sched.run(tune_round)
    assert rounds[:2] == [0, 2]  # the warm-up skips the deferred form
    out_of_space = [k for k, i in enumerate(rounds) if i == 0][3]  # the leader's fourth call spends 0
    assert 1 not in rounds[:out_of_space] and rounds[out_of_space + 1] == 1
    sched = TaskScheduler([2, 2, 2], 960, 16, seed=0, groups=["conv", "conv", "dense"], deferred=[0])
    direct, igemm, dense = _simulate(sched, [3e-3, 1e-3, 1e-3])
    undeferred = _simulate(TaskScheduler([2, 2, 2], 960, 16, seed=0, groups=["conv", "conv", "dense"]),
                           [3e-3, 1e-3, 1e-3])
    assert direct < undeferred[0] and igemm + dense > undeferred[1] + undeferred[2]
    alone = TaskScheduler([1, 1], 32, 16, epsilon=0.0, groups=["conv", "pool"], deferred=[0])
    assert _simulate(alone, [1e-3, 1e-3]) == [0, 32]
    rounds.clear()
    left["lead"] = 2
    alone = TaskScheduler([1, 1], 16 * 4, 16, epsilon=0.0, groups=["conv", "pool"], deferred=[1])
    alone.run(tune_round)  # task 0's space runs out after two rounds: then the deferred pool starts
    assert rounds == [0, 0, 0, 1, 1]
    with pytest.raises(ValueError, match="deferred"):
        TaskScheduler([1, 1], 32, 16, deferred=[2])


def _conv_fn(fused, key):
    return next(fn for fn in primitive_calls(fused) if workload_key(fn) == key)


def test_the_build_applies_a_logged_igemm_config(dqn_cuda, tmp_path):
    """The log's best for a conv's key is an implicit-GEMM config: the build's one schedule choice
    takes it as tuned and it compiles to PTX; with the direct config faster, that one is taken."""
    fused, ex = dqn_cuda
    direct, igemm = next(g for g in _by_key(ex.tasks).values() if len(g) == 2)
    target = direct.target
    cfg = igemm.config(len(igemm.space) // 2)
    fn = _conv_fn(fused, direct.key)
    with tuning_db.open(f"sqlite:///{tmp_path / 'log.db'}") as db:
        db.record(direct.key, str(target), direct.default.to_json(), [2e-4], workload=direct.workload)
        db.record(igemm.key, str(target), cfg.to_json(), [1e-4], workload=igemm.workload)
        choice = choose_schedule(fn, BoundSource(db, target, ex.tasks), target)
        assert (choice.source, choice.config.to_json()) == ("tuned", cfg.to_json())  # the log sorts knobs
        assert choice.config.template == IGEMM
        assert emit_kernel(choice.lowered.cdef, choice.config, target) is not None
        # interleaved re-measurements of each alternative: the fastest median over both wins
        for c, t in ((direct.default, 0.9e-4), (cfg, 1.2e-4), (igemm.default, 1.5e-4)):
            db.record(direct.key, str(target), c.to_json(), [t] * 3, runner_version=tuning_db.INTERLEAVED)
        choice = choose_schedule(fn, BoundSource(db, target, ex.tasks), target)
        assert (choice.source, choice.config.to_json()) == ("tuned", direct.default.to_json())


def test_each_alternative_reuses_only_its_own_pick(dqn_cuda, tmp_path):
    """`tune`'s reuse of a logged re-measurement reads the rows of the task's own template: the
    other alternative's faster rows under the same key are neither its pick nor its rivals."""
    _, ex = dqn_cuda
    direct, igemm = next(g for g in _by_key(ex.tasks).values() if len(g) == 2)
    target = str(direct.target)
    with tuning_db.open(f"sqlite:///{tmp_path / 'log.db'}") as db:
        for task, cost in ((direct, 2e-4), (igemm, 1e-4)):
            db.record(task.key, target, task.default.to_json(), [cost], workload=task.workload)
            db.record(task.key, target, task.default.to_json(), [cost] * 3,
                      runner_version=tuning_db.INTERLEAVED)
        for task, cost in ((direct, 2e-4), (igemm, 1e-4)):
            tuner = make_tuner("random", task, 0)
            tuner.update([task.index(task.default)], [_result(cost)])
            picked = _logged_pick(db, task, tuner, 3)
            assert picked is not None and picked[0] == task.default and picked[2] == pytest.approx(cost)


def _result(cost):
    return MeasureResult((cost,))


def test_transfers_are_checked_against_the_configs_own_template(dqn_cuda, tmp_path):
    """A donor conv's implicit-GEMM config transfers to another conv (a point of that conv's igemm
    space); a config of a template that does not schedule convolutions (cuda_dense) is refused,
    and so is one outside the space (a knob value the template never offers)."""
    _, ex = dqn_cuda
    convs = [g for g in _by_key(ex.tasks).values() if len(g) == 2]
    (_, igemm_a), (direct_b, igemm_b) = convs[0], convs[1]
    dense = next(t for t in ex.tasks if t.template == "cuda_dense")
    src = BoundSource(_NoLog(), direct_b.target, ex.tasks)
    shared = next(c for c in map(igemm_a.config, range(len(igemm_a.space))) if igemm_b.index(c) >= 0)
    assert src._fits(direct_b.key, shared.to_json())
    assert src._fits(direct_b.key, direct_b.default.to_json())
    assert not src._fits(direct_b.key, dense.default.to_json())
    bad = shared.to_json()
    bad["knobs"]["shared_k"] = 3
    assert not src._fits(direct_b.key, bad)
    assert src._fits("not-a-kernel-of-this-model", dense.default.to_json())
    transposed = _transposed_conv()
    with pytest.raises(ScheduleError, match="does not schedule"):  # the build's own check says so too
        check_in_space(direct_b.cdef, dense.default, direct_b.target)
    assert template_choices(transposed, direct_b.target) == [DIRECT]  # igemm does not claim it
    with pytest.raises(ScheduleError, match="does not schedule"):
        check_in_space(transposed, igemm_b.default, direct_b.target)
    with tuning_db.open(f"sqlite:///{tmp_path / 'log.db'}") as db:
        db.record(igemm_a.key, str(igemm_a.target), shared.to_json(), [1e-4], workload=igemm_a.workload)
        got = BoundSource(db, direct_b.target, ex.tasks).lookup(direct_b.key, workload=direct_b.workload)
        assert (got.kind, got.config) == ("transferred", shared.to_json())


def _transposed_conv():
    """A conv2d_transpose compute: tagged `conv2d_nchw` like a conv, but no implicit GEMM."""
    from autorelay.ir.types import TensorType
    from autorelay.op.check import infer_op_type
    from autorelay.op.conv_transpose import _conv2d_transpose_compute
    from autorelay.op.registry import get
    from autorelay.te import tensor as te

    xs, ws = (1, 4, 5, 6), (4, 6, 3, 3)
    kw = dict(strides=(2, 2), padding=(1, 1, 1, 1), kernel_layout="IOHW")
    out_type = infer_op_type("nn.conv2d_transpose", [TensorType(xs), TensorType(ws)], **kw)
    x, w = te.placeholder(xs, name="X"), te.placeholder(ws, name="W")
    return te.make_def([x, w], _conv2d_transpose_compute([x, w], get("nn.conv2d_transpose").make_attrs(kw),
                                                          out_type))


class _NoLog:
    def schedule_source(self, target, validate=None):
        return None


TINY_CONV = """#[version = "0.0.5"]
def @main(%data: Tensor[(1, 4, 6, 6), float32], %w: Tensor[(8, 4, 3, 3), float32], %b: Tensor[(8), float32]) {
  %0 = nn.conv2d(%data, %w, padding=[1, 1], channels=8, kernel_size=[3, 3]);
  nn.relu(nn.bias_add(%0, %b))
}"""


def test_tuning_a_model_tunes_both_alternatives_into_one_key(tmp_path):
    """`tune_model` on the emulated GPU (no GPU needed): both templates of the one conv get trials
    under its key, each resumes only its own rows (a rerun measures nothing), and the build takes
    the log's pick, whichever template it is."""
    import numpy as np

    import autorelay
    from search import tune_model
    from search.measure import TimingSettings
    from search.models import Model

    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((8, 4, 3, 3)).astype("float32"),
              "b": rng.standard_normal(8).astype("float32")}
    model = Model("tiny-conv", autorelay.parse(TINY_CONV), params,
                  {"data": rng.standard_normal((1, 4, 6, 6)).astype("float32")})
    url = f"sqlite:///{tmp_path / 'log.db'}"
    fast = TimingSettings(number=1, repeat=2, min_repeat_ms=0.0, warmup=0, timeout=30.0)
    kw = dict(trials=12, tuner="random", db=url, target=SM80 + " -device=emulated", pipeline="gpu",
              timing=fast, round_trials=4, batch=4)
    r = tune_model(model, **kw)
    assert [row.task.template for row in r.rows] == [DIRECT, IGEMM]
    assert len({row.task.key for row in r.rows}) == 1 and all(row.trials >= 4 for row in r.rows)
    assert sum(row.trials for row in r.rows) == r.new_trials == 12
    assert r.source_counts == {"tuned": 1} and r.max_abs_diff < 1e-4
    with tuning_db.open(url) as db:
        key = r.rows[0].task.key
        search_rows = [x for x in db.history(key, r.target) if x.runner_version is None]
        assert {x.config["template"] for x in search_rows} == {DIRECT, IGEMM} and len(search_rows) == 12
        pick = db.pick(key, r.target).config
    (row,) = [x for x in r.report.rows if x.workload_key == key]
    assert (row.source, row.detail) == ("tuned", f"{pick['template']} {pick['knobs']}")
    again = tune_model(model, **kw, compare=False)
    assert again.new_trials == 0 and [row.trials for row in again.rows] == [row.trials for row in r.rows]
