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
