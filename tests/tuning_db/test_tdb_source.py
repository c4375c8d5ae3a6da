"""The schedule source: exact, transferred (nearest shape), default - and it says which."""

from __future__ import annotations

import math

import pytest

import tuning_db
from tuning_db import LookupKind, TuningDBError, shape_distance

T = "llvm -mcpu=x"


def conv(n: int, c: int, hw: int, dtype: str = "float32") -> dict:
    return {"family": "conv2d", "shapes": [[n, c, hw, hw], [c, c, 3, 3]], "dtypes": [dtype, dtype]}


@pytest.fixture
def logged(db: tuning_db.TuningDB) -> tuning_db.TuningDB:
    for key, wl, tile in [
        ("c56", conv(1, 64, 56), 8),
        ("c14", conv(1, 64, 14), 2),
        ("c7", conv(1, 64, 7), 1),
    ]:
        db.record(key, T, {"tile": tile}, [1e-3])
        db.record(key, T, {"tile": tile * 4}, [2e-3], workload=wl)
    db.record("d1", T, {"tile": 99}, [1e-6], workload={"family": "dense", "shapes": [[1, 64, 28, 28]]})
    db.record("c28-other-target", "cuda", {"tile": 77}, [1e-9], workload=conv(1, 64, 28))
    return db


def test_shape_distance_is_sum_of_log_ratios() -> None:
    assert shape_distance(conv(1, 64, 56), conv(1, 64, 56)) == 0.0
    assert shape_distance(conv(1, 64, 28), conv(1, 64, 56)) == pytest.approx(2 * math.log2(2))
    assert shape_distance(conv(1, 64, 28), conv(1, 32, 28)) == pytest.approx(3.0)  # 64->32 in 3 dims
    assert shape_distance(conv(1, 64, 28), conv(1, 64, 28, "int8")) is None
    assert shape_distance(conv(1, 64, 28), {"family": "dense", "shapes": conv(1, 64, 28)["shapes"]}) is None
    assert shape_distance(conv(1, 64, 28), {"family": "conv2d", "shapes": [[1, 64, 28]]}) is None


def test_exact_match(logged: tuning_db.TuningDB) -> None:
    src = logged.schedule_source(T)
    assert src.lookup("c56", T).config == {"tile": 8}
    assert src.last_result.kind == LookupKind.EXACT == "exact"


def test_nearest_workload_of_same_family_and_target(logged: tuning_db.TuningDB) -> None:
    src = logged.schedule_source(T)
    # 20x20 is nearer 14 than 56 (|log2 20 - log2 14| * 2 < |log2 20 - log2 56| * 2).
    res = src.lookup("new20", T, workload=conv(1, 64, 20))
    assert (res.kind, res.donor_key, res.config) == (LookupKind.TRANSFERRED, "c14", {"tile": 2})
    assert res.distance == pytest.approx(2 * abs(math.log2(20) - math.log2(14)))
    assert src.lookup("new50", T, workload=conv(1, 64, 50)).config == {"tile": 8}
    # 28x28 is 2 log2-units from both 14 and 56: ties go to the smaller key, deterministically
    assert src.lookup("new28", T, workload=conv(1, 64, 28)).donor_key == "c14"
    assert src.last_result.kind == "transferred"
    # the cuda-only 28x28 workload is never a donor for llvm; int8 has no same-dtype neighbour
    assert src.lookup("new8", T, workload=conv(1, 64, 8, "int8")).config is None
    assert src.last_result.kind == "default"
    assert src.counts == {"transferred": 3, "default": 1}


def test_validate_rejects_and_the_next_candidate_is_tried(logged: tuning_db.TuningDB) -> None:
    calls = []

    def validate(key: str, config: dict) -> bool:
        calls.append((key, config["tile"]))
        if config["tile"] == 2:
            raise ValueError("tile 2 does not divide 20")  # the compiler signals illegal by raising
        return config["tile"] != 8

    src = logged.schedule_source(T, validate=validate)
    res = src.lookup("new20", T, workload=conv(1, 64, 20))
    # c14's configs (2, then 8) rejected, then c56's best (8) rejected, then c56's second (32) accepted
    assert calls == [("new20", 2), ("new20", 8), ("new20", 8), ("new20", 32)]
    assert (res.kind, res.donor_key, res.config) == ("transferred", "c56", {"tile": 32})
    assert src.rejections[0] == ("new20", "c14", "ValueError: tile 2 does not divide 20")
    never = logged.schedule_source(T, validate=lambda k, c: False)
    assert never.lookup("new20", T, workload=conv(1, 64, 20)).config is None
    assert never.last_result.kind == "default"


def test_a_donor_offers_its_pick_before_its_fastest_measurement(logged: tuning_db.TuningDB) -> None:
    """c14's fastest measurement (tile 2) lost its interleaved re-measurement to tile 8: the config
    c14's own builds use is the one a neighbour gets first."""
    for tile, cost in ((2, 1.8e-3), (8, 1.5e-3)):
        logged.record("c14", T, {"tile": tile}, [cost] * 3, runner_version=tuning_db.INTERLEAVED)
    assert logged.pick("c14", T).config == {"tile": 8} and logged.best("c14", T)[0].config == {"tile": 2}
    res = logged.schedule_source(T).lookup("new20", T, workload=conv(1, 64, 20))
    assert (res.kind, res.donor_key, res.config) == (LookupKind.TRANSFERRED, "c14", {"tile": 8})
    offered = []
    logged.schedule_source(T, validate=lambda k, c: offered.append(c["tile"]) or False).lookup(
        "new20", T, workload=conv(1, 64, 20))
    assert offered[:2] == [8, 2]  # then its fastest measured configs, each once


def test_description_from_describe_or_from_the_log(logged: tuning_db.TuningDB) -> None:
    src = logged.schedule_source(T, describe=lambda key: conv(1, 64, 13) if key == "k13" else None)
    assert src.lookup("k13", T).config == {"tile": 2} and src.last_result.kind == "transferred"
    assert src.lookup("unknown", T).config is None and src.last_result.kind == "default"
    logged.register_workload("reg6", conv(1, 64, 6))
    assert logged.schedule_source(T).lookup("reg6", T).config == {"tile": 1}
    assert logged.best("reg6", T) == []  # registering logs no measurement


def test_only_failed_measurements_do_not_count_as_exact(logged: tuning_db.TuningDB) -> None:
    logged.record("c30", T, {"tile": 5}, [], error="timeout", error_kind="timeout", workload=conv(1, 64, 30))
    src = logged.schedule_source(T)
    assert src.lookup("c30", T).config is not None and src.last_result.kind == "transferred"


def test_wrong_target_is_an_error_not_a_silent_default(logged: tuning_db.TuningDB) -> None:
    src = logged.schedule_source(T)
    with pytest.raises(TuningDBError, match="schedule source for target 'llvm -mcpu=x' was asked about"):
        src.lookup("c56", "cuda")
    assert src.lookup("c56", "llvm   -mcpu=x").config == {"tile": 8}  # same target, other spacing


def test_pipeline_comes_from_the_exact_target_first_then_the_nearest_thread_count(
        db: tuning_db.TuningDB) -> None:
    one, two, four = (f"{T} -threads={n}" for n in (1, 2, 4))
    for target in (one, two, four):
        db.record("c56", target, {"tile": 8}, [1e-3])
    db.start_run(model="net", info={"target": one, "model_key": "k", "pipeline": "nchwc"})
    db.start_run(model="net", info={"target": two, "model_key": "k", "pipeline": "default"})
    db.start_run(model="net", info={"target": one, "model_key": "other", "pipeline": "nchwc16"})
    # the newer 2-thread run does not hide the 1-thread run from a 1-thread build
    assert db.schedule_source(one).pipeline_for("k") == "nchwc"
    assert db.schedule_source(two).pipeline_for("k") == "default"
    # no 4-thread run: the nearest thread count's (2 before 1)
    assert db.schedule_source(four).pipeline_for("k") == "default"
    assert db.schedule_source(one).pipeline_for("unknown") is None
    # a layout search's run gives what its search chose
    db.start_run(model="net", info={"target": one, "model_key": "k", "pipeline": "plan"})
    assert db.schedule_source(one).pipeline_for("k") is None  # no plan stored for it
    db.store_layout_plan("k", one, {"blocks": {"conv2d_0": 8}}, latency_ms=2.0, chosen=False,
                         info={"winner": "nchwc16"})
    assert db.schedule_source(one).pipeline_for("k") == "nchwc16"
    db.store_layout_plan("k", one, {"blocks": {"conv2d_0": 8}}, latency_ms=1.0, chosen=True)
    assert db.schedule_source(one).pipeline_for("k") == "plan"
