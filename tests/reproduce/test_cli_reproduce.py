"""`autorelay reproduce` from the command line: the list, unknown names and an empty log's replot
give one clear line each, never a traceback."""

from __future__ import annotations

from pathlib import Path

from reproduce.registry import experiments
from search.cli import main


def test_list_shows_every_experiment_with_its_reference_and_times(capsys) -> None:
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    for exp in experiments():
        line = next(ln for ln in out.splitlines() if ln.startswith(exp.name + " "))
        assert exp.reference in line and ":" in line.split()[1]  # a duration like 1:30


def test_an_unknown_experiment_or_no_name_is_refused_in_one_line(capsys) -> None:
    assert main(["reproduce", "no-such-experiment"]) == 2
    err = capsys.readouterr().err
    assert "no experiment 'no-such-experiment'" in err and "rnns" in err and "Traceback" not in err
    assert main(["reproduce"]) == 2
    assert "--list" in capsys.readouterr().err


def test_replot_of_an_empty_log_says_to_run_it_first(tmp_path: Path, capsys) -> None:
    rc = main(["reproduce", "rnns", "--quick", "--replot", "--db", str(tmp_path / "log.db"),
               "--out", str(tmp_path / "out")])
    assert rc == 1
    assert "no stored results of rnns" in capsys.readouterr().err
