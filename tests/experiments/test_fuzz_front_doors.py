"""A short fuzz run of the front doors (the long one: experiments/fuzz_front_doors.py --minutes N):
only documented errors may come out of the Relay parser and type checker, the ONNX importer and
the JSONL importer, and every input is answered within the script's hang limit."""

from __future__ import annotations

import pytest
from experiment_scripts import load_script

fz = load_script("fuzz_front_doors")
EXAMPLES = 150


@pytest.fixture(scope="module")
def table():
    pytest.importorskip("onnx")
    return fz.doors()


@pytest.mark.parametrize("door", ["relay text", "onnx", "jsonl"])
def test_only_documented_errors_come_out(table, door: str) -> None:
    strategy, run = table[door]
    tally = fz.Tally()
    fz.fuzz(door, strategy, run, tally, EXAMPLES)
    assert tally.tried >= EXAMPLES // 2  # the inputs were really run
    assert tally.findings == {}


def test_the_checker_reports_undocumented_errors_and_hangs() -> None:
    """The oracle itself: a door raising something else, or not answering, is a finding."""
    tally = fz.Tally()
    tally.check(lambda: (_ for _ in ()).throw(KeyError("x")), "k")
    fz.HANG_S, old = 0.2, fz.HANG_S
    try:
        tally.check(lambda: __import__("time").sleep(5), "slow")
    finally:
        fz.HANG_S = old
    tally.check(lambda: (_ for _ in ()).throw(fz.AutoRelayError("fine")), "ok")
    assert tally.tried == 3 and len(tally.findings) == 2
    assert "hang" in tally.findings and any(k.startswith("KeyError") for k in tally.findings)
