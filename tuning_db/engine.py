"""From a URL (or a path, or nothing) to a configured SQLAlchemy engine.

SQLite is the embedded default: WAL mode (switched on only after the file proved to be a tuning
log) so readers never block the writer, a busy timeout so
concurrent writers queue instead of failing, and `BEGIN IMMEDIATE` for write transactions. The last
point matters: a deferred transaction that reads and then writes can fail at once with "database is
locked" when another process committed in between (the busy handler cannot help it), so every write
transaction takes the write lock up front. PostgreSQL is used through psycopg 3.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from .errors import TuningDBError, one_line
from .settings import Settings

_WRITE = "tuning_db_write"


def resolve_url(url: str | os.PathLike[str] | None, settings: Settings) -> URL:
    """Turn what the user gave into a SQLAlchemy URL, or raise a one-line TuningDBError."""
    default = url is None
    if url is None:
        url = settings.default_url or settings.default_path
    if isinstance(url, os.PathLike) or "://" not in str(url):
        text = str(url)
        if text in ("", ":memory:"):
            return make_url("sqlite://")
        path = Path(text).expanduser().absolute()
        if path.is_dir():
            raise TuningDBError(f"cannot open tuning log {path}: it is a directory")
        if default and url == settings.default_path:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.parent.is_dir():
            raise TuningDBError(f"cannot open tuning log {path}: directory {path.parent} does not exist")
        return URL.create("sqlite", database=str(path))
    try:
        parsed = make_url(str(url))
    except (ArgumentError, ValueError) as e:
        raise TuningDBError(f"malformed database URL {str(url)!r}: {one_line(e)}") from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "postgres":
        backend = "postgresql"
    if backend == "sqlite" and driver in ("", "pysqlite"):
        return parsed.set(drivername="sqlite")
    if backend == "postgresql" and driver in ("", "psycopg"):
        if not parsed.host and not parsed.query.get("host"):
            raise TuningDBError(f"malformed database URL {_safe(parsed)!r}: no host given")
        return parsed.set(drivername="postgresql+psycopg")
    raise TuningDBError(
        f"unsupported database URL scheme {parsed.drivername!r}: use sqlite:///PATH, a file path, "
        "or postgresql://USER@HOST:PORT/DB"
    )


def _safe(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def make_engine(url: URL, settings: Settings) -> Engine:
    """Create the engine and prove it can connect (one-line TuningDBError otherwise)."""
    try:
        if url.get_backend_name() == "sqlite":
            engine = _sqlite_engine(url, settings)
        else:
            engine = create_engine(
                url,
                pool_pre_ping=True,
                connect_args={"connect_timeout": settings.connect_timeout_s},
            )
    except ImportError as e:
        raise TuningDBError(
            f"cannot open tuning log {_safe(url)}: {e} (pip install 'psycopg[binary]')"
        ) from None
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as e:  # the boundary to an external service: any failure is "cannot open"
        engine.dispose()
        raise TuningDBError(f"cannot open tuning log {_safe(url)}: {one_line(e)}") from None
    return engine


def _sqlite_engine(url: URL, settings: Settings) -> Engine:
    memory = url.database in (None, "", ":memory:")
    kwargs: dict[str, object] = {"connect_args": {"timeout": settings.busy_timeout_s}}
    if memory:
        kwargs.update(poolclass=StaticPool, connect_args={"check_same_thread": False})
    engine = create_engine(url, **kwargs)
    busy_ms = int(settings.busy_timeout_s * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
        # Let us emit BEGIN ourselves (pysqlite's implicit transactions would defeat IMMEDIATE).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
            # journal_mode = WAL is not set here: it rewrites the file's header, and a file must not
            # change before `ensure_schema` has decided it is a tuning log (see `use_wal`).
            # NORMAL in WAL mode: a commit survives a crash of the process (kill -9); only a
            # power loss can drop the last transactions, never corrupt the file.
            cur.execute("PRAGMA synchronous = NORMAL")
            cur.execute("PRAGMA foreign_keys = ON")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def use_wal(engine: Engine) -> None:
    """Switch a SQLite file to WAL mode (persistent: once per file). Called only once the file is
    known to be a tuning log, so opening another program's database never modifies it."""
    if engine.url.get_backend_name() != "sqlite" or engine.url.database in (None, "", ":memory:"):
        return
    raw = engine.raw_connection()  # outside SQLAlchemy's transaction: WAL cannot be set inside one
    try:
        cur = raw.cursor()
        if cur.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            cur.execute("PRAGMA journal_mode = WAL")
        cur.close()
    finally:
        raw.close()


@contextmanager
def write_tx(engine: Engine) -> Iterator[Connection]:
    """A transaction that will write: on SQLite it holds the write lock from its first statement."""
    with engine.connect() as conn:
        conn.execution_options(**{_WRITE: True})
        with conn.begin():
            yield conn


@contextmanager
def read_tx(engine: Engine) -> Iterator[Connection]:
    """A read-only transaction (a consistent snapshot; never blocks writers under WAL)."""
    with engine.connect() as conn, conn.begin():
        yield conn


def insert_ignore(conn: Connection, table):  # type: ignore[no-untyped-def]
    """`INSERT ... ON CONFLICT DO NOTHING` for the connection's dialect: get-or-create under races."""
    mod = postgresql if conn.dialect.name == "postgresql" else sqlite
    return mod.insert(table).on_conflict_do_nothing()
