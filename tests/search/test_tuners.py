"""Tuners on a synthetic cost surface (deterministic, no timing noise), and one real end-to-end
tune of a tiny kernel through the builder, runner and tuning log."""

from __future__ import annotations

import math

import numpy as np
import pytest
from search_helpers import Faults, SyntheticMeasurer, dense_task, synthetic_cost

import tuning_db
from autorelay.codegen import resolve_target
from autorelay.kernel import compile_kernel
from search.measure import Measurer, TimingSettings
from search.tune import REMEASURE_TAG, transfer_from_log, tune_task, tune_tasks
from search.tuners import TUNERS, ModelBasedTuner, make_tuner


@pytest.fixture(scope="module")
def task():
    return dense_task(16, 24, 32)


@pytest.fixture
def db(tmp_path):
    d = tuning_db.open(f"sqlite:///{tmp_path / 'log.db'}")
    yield d
    d.close()


def tuner_costs(res, task, meas) -> dict[int, float]:
    return {i: synthetic_cost(task, i) for i in meas.measured if i not in meas.fail}


def _optimum(task) -> float:
    return min(synthetic_cost(task, i) for i in range(len(task.space)))


@pytest.mark.parametrize("name", TUNERS)
def test_every_tuner_proposes_fresh_configs_and_improves(task, db, name):
    if name == "cmaes":
        pytest.importorskip("cmaes")
    fail = {1, 2, 3}
    meas = SyntheticMeasurer(fail)
    res = tune_task(task, make_tuner(name, task, seed=1), 40, db, meas, batch=8)
    assert res.trials == 40
    assert len(set(meas.measured)) == 40  # never the same config twice
    hist = [r for r in db.history(task.key, str(task.target)) if r.runner_version != REMEASURE_TAG]
    assert len(hist) == 40
    assert {r.error_kind for r in hist if r.space_index in fail} <= {"illegal_schedule"}
    seen = [synthetic_cost(task, i) for i in meas.measured if i not in fail]
    assert min(seen) == pytest.approx(min(c for i, c in tuner_costs(res, task, meas).items()))
    if name != "grid":  # grid walks one corner of the space; the others must beat its median
        med = float(np.median([synthetic_cost(task, i) for i in range(len(task.space))]))
        assert min(seen) < med
    assert res.curve == sorted(res.curve, reverse=True)  # best-so-far never gets worse


@pytest.fixture(scope="module")
def avx2_task():
    """The dense task on a forced AVX2 CPU: the same space (and so the same statistics) on every host."""
    return dense_task(16, 24, 32, resolve_target("llvm -mcpu=znver3 -threads=1"))


@pytest.fixture(scope="module")
def all_features(avx2_task):
    """Features of the whole (small) space, lowered once and shared by the tuners below."""
    from search.tuners.model_based import Featurizer

    f = Featurizer(avx2_task)
    f.many(range(len(avx2_task.space)))
    return f.cache


def test_model_based_beats_random_on_a_smooth_surface(avx2_task, all_features):
    """The issue's search-efficiency bar in miniature: trials to reach 95% of the best speed."""
    task = avx2_task
    opt = _optimum(task)

    def trials_to_95(name: str, seed: int) -> int:
        meas = SyntheticMeasurer()
        tuner = make_tuner(name, task, seed=seed)
        if isinstance(tuner, ModelBasedTuner):
            tuner.features.cache = dict(all_features)
        tune_task(task, tuner, 96, tuning_db.open("sqlite://"), meas, batch=8, top_k=1)
        costs = [synthetic_cost(task, i) for i in meas.measured]
        return next((k for k, c in enumerate(costs, 1) if opt / c >= 0.95), 10**6)

    xgb = [trials_to_95("xgb", s) for s in range(3)]
    rnd = [trials_to_95("random", s) for s in range(5)]
    assert np.median(xgb) * 2 <= np.median(rnd), (xgb, rnd)


def test_early_stopping(task, db):
    meas = SyntheticMeasurer()
    res = tune_task(task, make_tuner("grid", task), 200, db, meas, batch=4, early_stopping=12)
    assert res.trials < 200


def test_transfer_from_similar_workload(task, db):
    tune_task(task, make_tuner("random", task, seed=0), 48, db, SyntheticMeasurer(), batch=16)
    other = dense_task(16, 32, 32)  # same family, nearby shape
    tuner = ModelBasedTuner(other, seed=0)
    assert not tuner.model.ready
    used = transfer_from_log(db, other, tuner)
    assert used >= 40 and tuner.model.ready
    # the transferred model already orders unseen configs of the new workload sensibly
    idx = list(range(0, len(other.space), 3))
    tuner.features.many(idx)
    scores = tuner._score(idx)
    ok = np.isfinite(scores)
    truth = -np.array([synthetic_cost(other, i) for i in idx])
    assert np.corrcoef(np.argsort(np.argsort(scores[ok])), np.argsort(np.argsort(truth[ok])))[0, 1] > 0.5


class _Spy:
    """Stands in for a model-based tuner: records which donor records `transfer` was offered."""

    def __init__(self) -> None:
        self.offered: list[list[tuple[dict, float]]] = []
        self.transferred = 0

    def transfer(self, donors) -> int:  # type: ignore[no-untyped-def]
        self.offered.extend(list(records) for records in donors)
        return sum(len(records) for records in donors)


def test_transfer_from_named_donors_only(task, db):
    """`donors` names the pre-training set exactly: a nearer workload in the log is left out, a far
    one named is used however far, the task's own key is never its donor, each donor's records are
    capped at `per_donor`."""
    far = dense_task(8, 24, 16)
    tune_task(task, make_tuner("random", task, seed=0), 24, db, SyntheticMeasurer(), batch=8, final=False)
    tune_task(far, make_tuner("random", far, seed=0), 16, db, SyntheticMeasurer(), batch=8, final=False)
    other = dense_task(16, 32, 32)
    nearest = _Spy()
    transfer_from_log(db, other, nearest, max_donors=1)
    assert [len(r) for r in nearest.offered] == [24]  # the nearest workload only, by default
    named = _Spy()
    used = transfer_from_log(db, other, named, donors=[far.key, other.key, far.key], per_donor=10)
    assert used == 10 and [len(r) for r in named.offered] == [10]
    far_configs = [r.config for r in db.history(far.key, str(far.target))][:10]
    assert [c for c, _ in named.offered[0]] == far_configs
    assert transfer_from_log(db, other, _Spy(), donors=[]) == 0


def test_tune_task_passes_its_donors_on(task, db):
    far = dense_task(8, 24, 16)
    tune_task(far, make_tuner("random", far, seed=0), 16, db, SyntheticMeasurer(), batch=8, final=False)
    tune_task(task, make_tuner("random", task, seed=0), 16, db, SyntheticMeasurer(), batch=8, final=False)
    other = dense_task(16, 32, 32)
    tuner = ModelBasedTuner(other, seed=0)
    tune_task(other, tuner, 8, db, SyntheticMeasurer(), batch=8, final=False, transfer_donors=[far.key])
    assert 0 < tuner.transferred <= 16  # the far donor's configs that lower on `other`, no more
    assert len(tuner.model._donors) == 1


def test_optuna_study_lives_in_the_tuning_log(task, tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    log = tuning_db.open(url)
    res = tune_task(task, make_tuner("tpe", task, storage=url), 16, log, SyntheticMeasurer(), batch=4)
    assert res.trials == 16
    import optuna

    study = optuna.load_study(study_name=f"autorelay:{task.key}:{task.target!s}:tpe", storage=url)
    assert len([t for t in study.trials if t.state.is_finished()]) >= 16
    assert len(tuning_db.open(url).history(task.key, str(task.target))) >= 16


def test_real_tuning_end_to_end_with_faults(task, db):
    tm = task.space.knob("tile_m").values
    hook = Faults(((tm[1], "segv"), (tm[2], "wrong")))
    settings = TimingSettings(number=1, repeat=3, min_repeat_ms=2.0, warmup=1, timeout=10.0)
    with Measurer(settings=settings, hook=hook) as m:
        res = tune_task(task, make_tuner("xgb", task, seed=0), 16, db, m, batch=8, top_k=2, rounds=3)
    hist = db.history(task.key, str(task.target))
    trials = [r for r in hist if r.runner_version != REMEASURE_TAG]
    assert len(trials) == 16 and res.trials == 16
    by_tm = {}
    for r in trials:
        by_tm.setdefault(r.config["knobs"]["tile_m"], set()).add(r.error_kind)
    assert by_tm.get(tm[1], {"runtime_crash"}) == {"runtime_crash"}
    assert by_tm.get(tm[2], {"wrong_answer"}) == {"wrong_answer"}
    assert sum(res.errors.values()) == sum(1 for r in trials if r.error_kind)
    assert math.isfinite(res.best_cost) and math.isfinite(res.default_cost) and res.best_cost > 0
    assert any(r.runner_version == REMEASURE_TAG for r in hist)  # both figures logged
    assert res.best_config["tile_m"] not in (tm[1], tm[2])
    # rerunning the finished command measures nothing and re-reports the logged figures
    with Measurer(settings=settings) as m:
        again = tune_task(task, make_tuner("xgb", task, seed=0), 16, db, m, batch=8, top_k=2, rounds=3)
    assert again.trials == 0 and again.resumed == 16
    after = db.history(task.key, str(task.target))
    assert [r.id for r in after if r.runner_version != REMEASURE_TAG] == [r.id for r in trials]
    default_logged = any(r.runner_version == REMEASURE_TAG and r.error_kind is None
                         and task.config_from_json(r.config) == task.default for r in hist)
    if default_logged:  # the last pick is in the log: it is reported, not re-timed
        assert len(after) == len(hist)
        assert again.best_config == res.best_config and again.best_cost == res.best_cost
    a, w = task.inputs()
    out = compile_kernel(task.cdef, res.best_config, task.target).run(a, w)
    np.testing.assert_allclose(out, a.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)


def test_tune_tasks_splits_one_budget(db):
    heavy, light = dense_task(16, 24, 32), dense_task(8, 16, 16)
    meas = SyntheticMeasurer()
    res = tune_tasks([heavy, light], [10.0, 1.0], "random", 96, db, meas, round_trials=16, batch=8)
    n_heavy = sum(1 for r in db.history(heavy.key, str(heavy.target)) if r.runner_version != REMEASURE_TAG)
    n_light = sum(1 for r in db.history(light.key, str(light.target)) if r.runner_version != REMEASURE_TAG)
    assert n_heavy + n_light == 96 and n_heavy > n_light >= 16
    assert all(math.isfinite(r.best_cost) for r in res)
    # rerunning with the same budget measures nothing new: the log already holds it
    before = len(meas.measured)
    tune_tasks([heavy, light], [10.0, 1.0], "random", 96, db, meas, round_trials=16, batch=8)
    assert len(meas.measured) == before
