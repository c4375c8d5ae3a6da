"""Argument types for the command line: a numeric option out of range is refused by argparse with
one line naming the option, before any work starts. (`--timeout 0` used to be accepted and turned
every candidate into a "timeout" row in the log.)"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _number(kind: Callable[[str], float], low: float, strict: bool, what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(value) or value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


positive_int = _number(int, 0, True, "an integer >= 1")
nonneg_int = _number(int, 0, False, "an integer >= 0")
positive_float = _number(float, 0.0, True, "a number > 0")
