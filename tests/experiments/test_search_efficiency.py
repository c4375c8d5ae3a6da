"""The search-efficiency script, a thin front door over `reproduce.curve_tuning` (its analysis is
tested in tests/reproduce/test_tuning_curves.py): argument checks, and one tiny real run (one small
ResNet-18 conv task, 6 trials, random + xgb) end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
from experiment_scripts import load_script

from reproduce.curve_tuning import history_gflops, model_conv_tasks, run_tag, tagged

se = load_script("search_efficiency")


def test_bad_arguments_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        se.parse_args(["--tuners", "xgb,annealing"])
    assert "annealing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        se.parse_args(["--trials", "0"])
    assert "--trials" in capsys.readouterr().err


def test_tiny_real_run_logs_trials_resumes_and_saves_the_plot(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import tuning_db

    db, plot = tmp_path / "t.db", tmp_path / "curve.png"
    args = ["--image-size", "32", "--tasks", "1", "--trials", "6", "--tuners", "random,xgb",
            "--threads", "1", "--min-repeat-ms", "2", "--db", str(db), "--plot", str(plot)]
    assert se.main(args) == 0
    out = capsys.readouterr().out
    assert "6 new trials" in out and "VERDICT" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    task = model_conv_tasks("resnet-18", 32, 1, 1)[0]
    with tuning_db.open_db(str(db)) as log:
        for tuner in ("random", "xgb"):
            speeds = history_gflops(log, tagged(task, run_tag(tuner, 0)), 100)
            assert len(speeds) == 6 and max(speeds) > 0
    assert se.main(args) == 0  # everything is logged: the rerun measures nothing new
    assert "new trials" not in capsys.readouterr().out
