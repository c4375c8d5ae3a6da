"""Timing peers in their own processes: a peer that crashes while building or while being timed
is that peer's recorded error; the others are still timed (never a hang)."""

from __future__ import annotations

import os

from reproduce.peers import time_isolated


def steady():
    return (lambda: sum(range(100))), 1.0


def dies_while_building():
    os._exit(3)


def dies_while_timed():
    calls = [0]

    def run() -> None:
        calls[0] += 1
        if calls[0] > 20:  # after the warm-up: in the middle of a timed block
            os._exit(5)
    return run, 2.0


def test_a_crashing_peer_is_an_error_and_the_others_are_timed() -> None:
    peers = {"ok": (steady, ()), "build": (dies_while_building, ()), "timing": (dies_while_timed, ())}
    timed = time_isolated(peers, rounds=3, block_s=0.01)
    assert timed["build"].error == "the worker process died (exit code 3)"
    assert timed["timing"].error == "during timing: the worker process died (exit code 5)"
    assert not timed["ok"].error and len(timed["ok"].block_medians_s) == 3 and timed["ok"].output == 1.0


def test_block_medians_record_their_round_and_pair_by_it() -> None:
    """`paired_ratio` divides block medians of the same round only: a peer that missed rounds (it
    died, or was added late) is compared on the rounds both were timed."""
    import math

    from reproduce.peers import PeerTiming, paired_ratio

    timed = time_isolated({"a": (steady, ()), "b": (steady, ())}, rounds=4, block_s=0.005)
    assert timed["a"].block_rounds == [0, 1, 2, 3] == timed["b"].block_rounds
    # the host twice as slow in rounds 2 and 3 for both: the per-round ratio does not move
    a = PeerTiming("a", block_medians_s=[1.0, 1.1, 2.0, 2.2], block_rounds=[0, 1, 2, 3])
    b = PeerTiming("b", block_medians_s=[2.0, 2.2, 4.0, 4.4], block_rounds=[0, 1, 2, 3])
    assert paired_ratio(a, b) == (0.5, 0.5, 0.5)
    assert paired_ratio(b, a) == (2.0, 2.0, 2.0)
    late = PeerTiming("c", block_medians_s=[4.4, 8.0], block_rounds=[1, 2])  # rounds 1 and 2 only
    med, lo, hi = paired_ratio(a, late)
    assert math.isclose(med, 0.25) and math.isclose(lo, 0.25) and math.isclose(hi, 0.25)  # 1.1/4.4, 2/8
    assert all(math.isnan(v) for v in paired_ratio(a, PeerTiming("none")))
