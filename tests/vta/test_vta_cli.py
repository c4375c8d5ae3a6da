"""`autorelay tune|compile|run --target vta` on a zoo CNN (ResNet-18 at a small image size): the
offloaded convolutions are tuned on simulated cycles into the log, a rerun resumes without new
measurements, and run/compile build with the logged knobs."""

from __future__ import annotations

import re

import pytest

import tuning_db
from search.cli import main

pytestmark = pytest.mark.vta


def test_tune_resume_and_run_on_the_accelerator(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    common = ["--model", "resnet-18", "--image-size", "32", "--target", "vta", "--db", url,
              "--calibration-random", "2"]
    assert main(["tune", *common, "--trials", "24", "--tuner", "random", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"(\d+) of 21 layers offloaded", out) and "logged under vta -hw=" in out
    with tuning_db.open(url) as db:
        first = db.stats()["measurements"]
    assert first >= 10  # every offloaded task measured at least its default
    assert main(["tune", *common, "--trials", "24", "--tuner", "random", "--threads", "1"]) == 0
    with tuning_db.open(url) as db:
        assert db.stats()["measurements"] == first  # resumed: the budget was already spent
    capsys.readouterr()
    assert main(["run", *common, "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "vta tuned" in out and re.search(r"accelerator \d+ cycles", out) and "outputs finite: True" in out
    assert main(["compile", *common, "--threads", "1"]) == 0
    assert "vta tuned" in capsys.readouterr().out
    assert main(["compile", *common, "--threads", "1", "--precision", "plan"]) == 1  # one-line errors
    assert main(["compile", *common, "--threads", "1", "--output", str(tmp_path / "m.zip")]) == 1
    err = capsys.readouterr().err
    assert "--precision plan is not supported" in err and "cannot be saved" in err
