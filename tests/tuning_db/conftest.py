"""Fixtures for the tuning_db tests: a fresh SQLite file per test, and a fresh PostgreSQL schema per
test on the server `.ci/setup-services.sh` started (URL in $AUTORELAY_TEST_PG_URL or
/tmp/autorelay-pg/url). Without a reachable server the PostgreSQL tests skip, except under CI
(CI=true), where they fail: CI must run them."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import tuning_db
from tuning_db import settings as settings_mod
from tuning_db.migrate import create_schema

PG_URL_FILE = Path(os.environ.get("AUTORELAY_PG_DIR", "/tmp/autorelay-pg")) / "url"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test may touch the user's real tuning log."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("AUTORELAY_DB", raising=False)
    settings_mod.settings.cache_clear()
    yield
    settings_mod.settings.cache_clear()


def _pg_base_url() -> str | None:
    url = os.environ.get("AUTORELAY_TEST_PG_URL")
    if not url and PG_URL_FILE.is_file():
        url = PG_URL_FILE.read_text().strip()
    return url or None


def _pg_admin(base: str):  # type: ignore[no-untyped-def]
    import sqlalchemy as sa

    return sa.create_engine(
        base.replace("postgresql://", "postgresql+psycopg://", 1), connect_args={"connect_timeout": 3}
    )


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL tests must run in CI, but {reason} (see .ci/setup-services.sh)")
    pytest.skip(f"no PostgreSQL server: {reason}; run .ci/setup-services.sh to start one")


@pytest.fixture(scope="session")
def pg_base_url() -> str:
    base = _pg_base_url()
    if base is None:
        _unavailable(f"neither $AUTORELAY_TEST_PG_URL nor {PG_URL_FILE} is set")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed")
    try:
        engine = _pg_admin(base)
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        engine.dispose()
    except Exception as e:
        _unavailable(f"{base} is not reachable ({str(e).splitlines()[0]})")
    return base


@pytest.fixture
def pg_url(pg_base_url: str) -> Iterator[str]:
    """A URL whose search_path is a fresh schema: tests never see each other's tables."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    engine = _pg_admin(pg_base_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {name}")
    engine.dispose()  # hold no connection while tests fork writer processes
    sep = "&" if "?" in pg_base_url else "?"
    yield f"{pg_base_url}{sep}options=-csearch_path%3D{name}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA {name} CASCADE")
    engine.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return str(tmp_path / "log.sqlite")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    """Both backends: the same behaviour is required of each."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return request.getfixturevalue(name)


@pytest.fixture
def db(url: str) -> Iterator[tuning_db.TuningDB]:
    d = tuning_db.open(url)
    yield d
    d.close()


@pytest.fixture
def old_log(tmp_path: Path) -> Callable[[int], Path]:
    """Makes an empty SQLite log with the tables of an older schema version (to be upgraded)."""

    def make(version: int) -> Path:
        from sqlalchemy import create_engine

        path = tmp_path / f"v{version}.sqlite"
        engine = create_engine(f"sqlite:///{path}")
        with engine.begin() as conn:
            create_schema(conn, version)
        engine.dispose()
        return path

    return make
