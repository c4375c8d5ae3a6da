"""Tuning the simulated accelerator's conv knobs: the same tuners and XGBoost model, simulated
cycles as the measurement, every result in the tuning log under a `vta` target, resumable."""

from __future__ import annotations

import pytest

import tuning_db
from autorelay.schedule.space import Config
from autorelay.vta import VTAConfig
from autorelay.vta.conv import ConvShape
from search.measure.result import ErrorKind, MeasureInput
from search.tune import REMEASURE_TAG, tune_task
from search.tuners import make_tuner
from search.vta_tuning import VTAMeasurer, vta_conv_task, vta_target

pytestmark = pytest.mark.vta
SHAPE = ConvShape(48, 14, 14, 40, 3, 3, 1, 1)  # channels not multiples of 16, partial edge tiles


@pytest.mark.parametrize("tuner", ["xgb", "random"])
def test_tuning_logs_simulated_times_and_resumes(tmp_path, tuner):
    task = vta_conv_task(SHAPE)
    db = tuning_db.open(f"sqlite:///{tmp_path / 'log.sqlite'}")
    first = tune_task(task, make_tuner(tuner, task, 0), 24, db, VTAMeasurer(), batch=8)
    assert first.trials == 24 and first.best_cost <= first.default_cost
    rows = [r for r in db.history(task.key, str(task.target)) if r.runner_version != REMEASURE_TAG]
    assert len({str(r.config) for r in rows}) == 24 and str(task.target).startswith("vta -hw=")
    again = tune_task(task, make_tuner(tuner, task, 0), 24, db, VTAMeasurer(), batch=8)
    assert again.trials == 0 and again.resumed == 24
    picked = db.schedule_source(str(task.target)).lookup(task.key).config
    assert task.config_from_json(picked) == first.best_config


def test_a_config_that_does_not_fit_is_an_illegal_point():
    task = vta_conv_task(SHAPE, VTAConfig(inp_buffer_bytes=4096))  # 256 input tiles
    huge = Config(task.space.template, (("tile_h", 14), ("tile_w", 14), ("tile_oc", 3), ("tile_ic", 3),
                                        ("vthreads", 2)))
    (res,) = VTAMeasurer().measure(task, [MeasureInput(huge, task.index(huge))])
    assert res.error is ErrorKind.ILLEGAL_SCHEDULE and task.features_of(huge) is None
    (ok,) = VTAMeasurer().measure(task, [MeasureInput(task.default, task.index(task.default))])
    assert ok.ok and ok.extra["cycles"] > 0


def test_the_target_name_carries_every_hardware_parameter():
    assert vta_target(VTAConfig()) == vta_target(VTAConfig())
    assert str(vta_target(VTAConfig())) != str(vta_target(VTAConfig(dram_bytes_per_cycle=16)))
    assert str(vta_target(VTAConfig())) != str(vta_target(VTAConfig(clock_mhz=333.0)))


def test_a_lowering_failure_is_a_recorded_error_not_a_dead_tuner(monkeypatch):
    import search.vta_tuning as vt

    task = vta_conv_task(SHAPE)

    def broken(*args, **kwargs):
        raise IndexError("tile index out of range")

    monkeypatch.setattr(vt, "run_conv", broken)
    (res,) = VTAMeasurer().measure(task, [MeasureInput(task.default, task.index(task.default))])
    assert res.error is ErrorKind.COMPILE_ERROR and "IndexError" in res.message
