"""What the reproduce tests share: a quick-mode context over a fresh tuning log."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import tuning_db
from reproduce import Context


@pytest.fixture
def ctx(tmp_path: Path):
    db = tuning_db.open(tmp_path / "log.db")
    yield Context(quick=True, threads=1, db_url=db.url, db=db, out_dir=tmp_path / "out", log=io.StringIO())
    db.close()
