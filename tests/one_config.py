"""A schedule source that holds one config for one workload: a test builds a model with exactly
that config on one kernel (every other kernel: its template's default). Import it as
``from one_config import OneConfig`` (pytest puts tests/ on the path, see conftest)."""

from __future__ import annotations

from autorelay.schedule.source import Lookup
from autorelay.schedule.space import Config


class OneConfig:
    def __init__(self, key: str, config: Config) -> None:
        self.key, self.config = key, config

    def lookup(self, key: str, target: str, *, workload: dict | None = None) -> Lookup:
        return Lookup(self.config, "exact") if key == self.key else Lookup(None)
