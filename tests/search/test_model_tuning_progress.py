"""The `autorelay tune` progress display: plain lines when not a terminal, one rewritten status
line on a terminal; GFLOP/s and ETA computed from the task's FLOPs and the trial rate."""

from __future__ import annotations

import io
import re

import pytest

from autorelay.frontend import zoo
from search import extract_tasks
from search.progress import ConsoleProgress


@pytest.fixture(scope="module")
def tasks():
    mod, params = zoo.get("mlp")
    return extract_tasks(mod, params)


def test_plain_lines_when_not_a_terminal(tasks):
    out = io.StringIO()
    p = ConsoleProgress(out, tty=False)
    p.tasks(tasks, [], 40, [0, 8, 0, 0])
    p.trials(0, 8, tasks[0].flops / 2e9, 8)  # best: 2 GFLOP/s exactly
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("4 tasks (100.0% of the model's FLOPs)") and "8 already in the log" in lines[0]
    assert re.search(r"\[tasks 2/4\] trials 16/40 \| t0\.\S+: 8 trials, best 2\.00 GFLOP/s", lines[1])
    assert "ETA" in lines[1] and "\r" not in out.getvalue()


def test_terminal_rewrites_one_line(tasks):
    out = io.StringIO()
    p = ConsoleProgress(out, tty=True)
    p.tasks(tasks, [], 16, [0, 0, 0, 0])
    p.trials(0, 8, float("inf"), 8)
    p.trials(1, 8, tasks[1].flops / 1e9, 16)
    text = out.getvalue()
    assert text.count("\r") == 3 and "no valid config yet" in text and "1.00 GFLOP/s" in text
    p.stage("re-measuring")
    assert out.getvalue().endswith(")\n")  # the status line was ended before the stage line
