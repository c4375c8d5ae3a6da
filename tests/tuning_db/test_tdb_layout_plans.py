"""The `layout_plans` table: store and read back measured layout plans (the latest search counts),
`autorelay db plan --model M`, and the version-4 -> 5 upgrade of an existing log."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import tuning_db
from search.cli import main
from tuning_db import TuningDBError

TARGET = "llvm -mcpu=znver5 -threads=2"
INFO = {"winner": "plan", "latencies_ms": {"plan": 2.0, "default": 3.0}, "modeled_ms": 1.9, "exact": True,
        "layers": [{"layer": "conv2d_0", "block": 8, "kernel_ms": {"0": 1.5, "8": 1.25},
                    "transform_ms": 0.125, "source": "tuned"}]}


def test_store_latest_and_list(tmp_path: Path) -> None:
    db = tuning_db.open(str(tmp_path / "log.sqlite"))
    first = db.store_layout_plan("key-a", TARGET, {"blocks": {"conv2d_0": 0}}, latency_ms=3.0, model="net",
                                 chosen=False, info={"winner": "nchwc"})
    second = db.store_layout_plan("key-a", "llvm -threads=2 -mcpu=znver5", {"blocks": {"conv2d_0": 8}},
                                  latency_ms=2.0, model="net", chosen=True, info=INFO)
    assert second != first
    got = db.layout_plan("key-a", TARGET)
    assert got is not None and got.id == second and got.plan == {"blocks": {"conv2d_0": 8}}
    assert got.winner == "plan" and got.info == INFO and got.latency_ms == 2.0
    assert [r.id for r in db.layout_plans("net")] == [second, first]
    assert db.layout_plans("net")[1].winner == "nchwc"
    assert [r.id for r in db.layout_plans("key-a", TARGET)] == [second, first]
    assert db.layout_plan("key-b", TARGET) is None and db.layout_plans("other") == []
    with pytest.raises(TuningDBError, match="blocks"):
        db.store_layout_plan("key-a", TARGET, {"precisions": {}}, latency_ms=1.0)
    with pytest.raises(TuningDBError, match="latency_ms"):
        db.store_layout_plan("key-a", TARGET, {"blocks": {}}, latency_ms=float("nan"))
    db.close()


def test_db_plan_command_prints_per_layer_rows(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    url = str(tmp_path / "log.sqlite")
    with tuning_db.open(url) as db:
        db.store_layout_plan("key-a", TARGET, {"blocks": {"conv2d_0": 8}}, latency_ms=2.0, model="net",
                             chosen=True, info=INFO)
    assert main(["db", "plan", "--db", url, "--model", "net"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "builds use plan" in out[0] and "plan 2 ms" in out[0] and "default 3 ms" in out[0]
    row = next(line.split() for line in out if line.startswith("conv2d_0"))
    assert row == ["conv2d_0", "8", "1.5000", "1.2500", "0.1250", "tuned"]
    assert main(["db", "plan", "--db", url, "--model", "missing"]) == 1
    assert "autorelay db plan: no layout plan stored for model 'missing'; plans are stored for net" \
        in capsys.readouterr().err


def test_db_plan_names_the_sized_model_a_bare_name_missed(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    """`tune --image-size 32` stores its plan as `resnet-18@32`: asking for `resnet-18` says so."""
    url = str(tmp_path / "log.sqlite")
    with tuning_db.open(url) as db:
        for name in ("resnet-18@32", "resnet-18@32:b8", "vgg-16"):
            db.store_layout_plan(f"key-{name}", TARGET, {"blocks": {"conv2d_0": 8}}, latency_ms=2.0,
                                 model=name, chosen=True, info=INFO)
    assert main(["db", "plan", "--db", url, "--model", "resnet-18"]) == 1
    err = capsys.readouterr().err
    assert "stored for resnet-18@32, resnet-18@32:b8 (give --model resnet-18@32)" in err and "vgg" not in err
    assert main(["db", "plan", "--db", url, "--model", "resnet-18@32"]) == 0


def test_db_plan_shows_the_precision_picked_on_the_layout_plan(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    """A quantization plan that `autorelay quantize` measured on the stored layout plan joins its
    table as a precision column; one measured on another layout, or not picked, does not."""
    url = str(tmp_path / "log.sqlite")
    layout = {"blocks": {"conv2d_0": 8}}
    fields = {"calibration": "max", "metric": "rel_error", "accuracy": 0.01, "accuracy_drop": 0.01,
              "max_drop": 0.02, "fp32_latency_ms": 2.0}
    with tuning_db.open(url) as db:
        db.store_layout_plan("key-a", TARGET, layout, latency_ms=2.0, model="net", chosen=True, info=INFO)
        db.store_plan("key-a", TARGET, {"default": "fp32", "precisions": {"conv2d_0": "int8"}}, model="net",
                      latency_ms=1.0, chosen=False, info={"pipeline": "plan", "layout_plan": layout},
                      **fields)
        db.store_plan("key-a", TARGET, {"default": "int8", "precisions": {"conv2d_0": "fp32"}}, model="net",
                      latency_ms=1.5, chosen=True, info={"pipeline": "nchwc"}, **fields)
    assert main(["db", "plan", "--db", url, "--model", "net"]) == 0
    out = capsys.readouterr().out
    assert "precision plan #" not in out and "precision" not in out.splitlines()[-3]
    with tuning_db.open(url) as db:
        pick = db.store_plan("key-a", TARGET, {"default": "fp32", "precisions": {"conv2d_0": "int8"}},
                             model="net", latency_ms=1.25, chosen=True,
                             info={"pipeline": "plan", "layout_plan": layout}, **fields)
    assert main(["db", "plan", "--db", url, "--model", "net"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(line for line in out if line.startswith(f"precision plan #{pick} "))
    assert "1.25 ms against fp32 2 ms" in line
    row = next(line.split() for line in out if line.startswith("conv2d_0"))
    assert row == ["conv2d_0", "8", "1.5000", "1.2500", "0.1250", "tuned", "int8"]


def test_the_fusion_line_says_what_the_stored_fusion_plan_fuses() -> None:
    """`db plan`'s fusion line, from real FusionPlan JSON: prologues only under rules that fuse
    them (a pooling-epilogue plan keeps Relay's rules, its prologue candidates unfused), the
    pooling epilogues, the depthwise bands, and whether values are stored with zero borders."""
    from dataclasses import replace

    from autorelay.op.registry import OpPattern
    from autorelay.transform.fusion_plan import FusionPlan
    from tuning_db.cli_plans import ANCHOR_PATTERN, _fusion_line

    assert int(OpPattern.OUT_ELEMWISE_FUSABLE) == ANCHOR_PATTERN
    info = {"prologue_edges": {"0->1": "layout_transform -> nn.conv2d", "7->8": "reshape -> nn.dense"},
            "pool_edges": {"3->4": "nn.relu -> nn.max_pool2d"}}

    def line(fusion: FusionPlan | None, variant: str) -> str:
        plan = {"blocks": {}} | ({"fusion": fusion.to_json()} if fusion is not None else {})
        return _fusion_line(plan, {**info, "fusion": variant})

    relay = line(None, "plan")
    assert "as prologues none" in relay and "no pooling epilogue (candidates: 3->4" in relay
    assert "padding folded into producers" in relay
    one = line(FusionPlan.prologues().without_edges([(7, 8)]), "plan+prologue 0->1")
    assert "as prologues 0->1 (layout_transform -> nn.conv2d) (not fused: 7->8" in one
    plain_pools = replace(FusionPlan.default(), pool_epilogues=True, halos=False)
    pools = line(plain_pools, "plan+pool epilogues (no halos)")
    assert "as prologues none" in pools and "pooling epilogues 3->4" in pools
    assert "no zero-bordered values" in pools and pools.startswith("fusion (plan+pool epilogues (no halos))")
    assert _fusion_line({"blocks": {}}, {"winner": "plan"}) == ""  # stored before fusion was a choice
    # depthwise bands: the fused ones and, with the variant that drops small maps, those left apart
    bands = {**info, "band_edges": {"11->12": 56, "31->32": 7}}
    some = _fusion_line({"blocks": {}, "fusion": replace(FusionPlan.default(), depthwise_bands=True)
                         .without_edges([(31, 32)]).to_json()}, {**bands, "fusion": "plan+depthwise bands"})
    assert "depthwise bands 11->12 (56 rows) (not fused: 31->32 (7 rows))" in some
    assert "depthwise bands none (not fused: 11->12 (56 rows), 31->32 (7 rows))" in _fusion_line(
        {"blocks": {}}, {**bands, "fusion": "plan"})
    # expansions: those of fused bands whose own edge is on
    grown = {**bands, "expansion_edges": {"8->9": {"rows": 56, "band": "11->12"},
                                          "28->29": {"rows": 7, "band": "31->32"}}}
    expanded = replace(FusionPlan.default(), depthwise_bands=True, expansions=True).without_edges([(31, 32)])
    line = _fusion_line({"blocks": {}, "fusion": expanded.to_json()}, {**grown, "fusion": "plan+expansions"})
    assert "expansions 8->9 (56 rows, band 11->12) (not fused: 28->29 (7 rows, band 31->32))" in line
    off = _fusion_line({"blocks": {}, "fusion": expanded.without_edges([(8, 9)]).to_json()}, grown)
    assert "expansions none (not fused: 8->9" in off


def test_version_4_log_is_upgraded_in_place(old_log) -> None:
    path = old_log(4)
    con = sqlite3.connect(path)
    assert "layout_plans" not in {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    con.execute("INSERT INTO targets (name, kind, created_at) VALUES ('llvm', 'llvm', 0)")
    con.commit()
    con.close()
    with tuning_db.open(str(path)) as db:
        assert db.upgraded_from == 4
        db.store_layout_plan("k", "llvm", {"blocks": {}}, latency_ms=1.0)
    con = sqlite3.connect(path)
    assert con.execute("SELECT version FROM schema_info").fetchall() == [(tuning_db.SCHEMA_VERSION,)]
    assert con.execute("SELECT name FROM targets").fetchall() == [("llvm",)]
    assert con.execute("SELECT count(*) FROM layout_plans").fetchall() == [(1,)]
    con.close()
