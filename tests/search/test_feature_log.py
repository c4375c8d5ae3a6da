"""The model-based tuner's feature vectors go into the tuning log as it measures, and a resumed or
transfer-warmed tuner reads them back instead of lowering every logged config again — with the
same vectors (the oracle: lowering the config afresh) and so the same cost model."""

from __future__ import annotations

import numpy as np
import pytest
from search_helpers import SyntheticMeasurer, dense_task

import search.tuners.model_based as model_based
import tuning_db
from autorelay.codegen import resolve_target
from search.features import features_version
from search.tune import resume, transfer_from_log, tune_task
from search.tuners import ModelBasedTuner, make_tuner

TARGET = "llvm -mcpu=znver3 -threads=1"


@pytest.fixture(scope="module")
def task():
    return dense_task(16, 24, 32, resolve_target(TARGET))


@pytest.fixture
def db(tmp_path):
    d = tuning_db.open(f"sqlite:///{tmp_path / 'log.db'}")
    yield d
    d.close()


@pytest.fixture
def lowerings(monkeypatch):
    """Counts the configs lowered for features from here on."""
    calls: list[object] = []
    real = model_based.lower_features

    def counting(task, config):  # type: ignore[no-untyped-def]
        calls.append(config)
        return real(task, config)

    monkeypatch.setattr(model_based, "lower_features", counting)
    return calls


def _logged(db, task) -> dict:
    return db.features(task.key, str(task.target), features_version())


def test_measured_configs_are_logged_and_a_resume_lowers_none(task, db, lowerings):
    tune_task(task, make_tuner("xgb", task, seed=0), 24, db, SyntheticMeasurer(), batch=8, final=False)
    measured = {r.space_index for r in db.history(task.key, str(task.target))}
    logged = _logged(db, task)
    assert len(measured) == 24 and len(logged) == 24
    for i in measured:  # each vector is what lowering the config gives
        cfg = task.config(i)
        assert logged[tuning_db.config_key(cfg.to_json())] == model_based.lower_features(task, cfg)

    lowerings.clear()
    resumed = ModelBasedTuner(task, seed=0)
    assert resume(db, task, resumed)[0] == 24
    assert lowerings == []
    fresh = ModelBasedTuner(task, seed=0)  # the same resume with the log's vectors withheld
    fresh.features.read_log = True
    resume(db, task, fresh)
    assert len(lowerings) == 24
    probe = list(range(0, len(task.space), 7))
    resumed.features.many(probe)
    fresh.features.many(probe)
    assert np.array_equal(resumed._score(probe), fresh._score(probe))


def test_transferred_configs_are_logged_on_the_recipient(task, db, lowerings):
    tune_task(task, make_tuner("random", task, seed=0), 16, db, SyntheticMeasurer(), batch=8, final=False)
    assert _logged(db, task) == {}  # a tuner without loop-IR features logs none
    other = dense_task(16, 32, 32, resolve_target(TARGET))
    lowerings.clear()
    assert transfer_from_log(db, other, ModelBasedTuner(other, seed=0)) == 16
    assert len(lowerings) == 16
    logged = _logged(db, other)  # lowered on the recipient's shape, and logged under its key
    assert len(logged) == 16
    donor = db.history(task.key, str(task.target))[0].config
    assert logged[tuning_db.config_key(donor)] == model_based.lower_features(
        other, other.config_from_json(donor))
    lowerings.clear()
    again = ModelBasedTuner(other, seed=0)
    assert transfer_from_log(db, other, again) == 16 and again.model.ready
    assert lowerings == []
