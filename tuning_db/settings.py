"""Settings of the tuning log, read from the environment once into a typed object.

Only `open(url=None)` consults them: an explicit URL always wins. `AUTORELAY_DB` (a URL or a file
path) overrides the default file, which lives in the user's data directory
(`$XDG_DATA_HOME/autorelay/tuning.sqlite`, else `~/.local/share/autorelay/tuning.sqlite`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DEFAULT_FILENAME = "tuning.sqlite"


@dataclass(frozen=True, slots=True)
class Settings:
    """Where the default tuning log lives and how long writers wait for a lock."""

    default_url: str | None
    """`AUTORELAY_DB` when set (URL or path), else None: use `default_path`."""
    default_path: Path
    busy_timeout_s: float = 60.0
    connect_timeout_s: int = 5

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        data_home = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        url = env.get("AUTORELAY_DB") or None
        return cls(default_url=url, default_path=Path(data_home) / "autorelay" / DEFAULT_FILENAME)


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The process-wide settings, read from the environment on first use only."""
    return Settings.from_env()
