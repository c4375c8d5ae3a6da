"""How the command line shows a duration: `m:ss`, or `h:mm:ss` from an hour up, `?` when unknown.
Shared by `autorelay tune`'s progress line and `autorelay reproduce` (kept free of heavy imports)."""

from __future__ import annotations

import math


def clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


__all__ = ["clock"]
