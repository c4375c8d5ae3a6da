"""Create, check and upgrade the schema in place (our own small migration table: `schema_info`).

Opening a database runs `ensure_schema`: an empty database gets the current tables; an older one is
upgraded step by step inside one transaction (so a failed upgrade leaves it as it was); a newer one
is refused, because writing rows it does not understand could corrupt another version's data.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from sqlalchemy import Connection, Engine, Index, inspect, select, text, update

from . import schema
from .engine import read_tx, write_tx
from .errors import SchemaVersionError, TuningDBError

_PG_LOCK_KEY = 0x7475_6E69  # advisory lock serialising schema creation across PostgreSQL clients


def ensure_schema(engine: Engine) -> int:
    """Bring the database to CURRENT_VERSION; return the version it had before (0: new)."""
    with read_tx(engine) as conn:
        found = _read_version(conn)
    if found == schema.CURRENT_VERSION:
        return found
    _refuse_newer(found)
    with write_tx(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        found = _read_version(conn)  # another process may have done it while we waited
        _refuse_newer(found)
        if found == 0:
            create_schema(conn, schema.CURRENT_VERSION)
        version = found or schema.CURRENT_VERSION
        while version < schema.CURRENT_VERSION:
            UPGRADES[version](conn)
            version += 1
            conn.execute(update(schema.schema_info).values(version=version, updated_at=time.time()))
    return found


def _read_version(conn: Connection) -> int:
    names = {n for n in inspect(conn).get_table_names() if not n.startswith("sqlite_")}
    if "schema_info" not in names:
        # Any table at all means another program's database: creating ours in it would change a
        # file we were never meant to touch (`--db` pointing at the wrong file).
        if names:
            shown = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
            raise TuningDBError(f"not a tuning log: the database has tables {shown} but no schema_info")
        return 0
    version = conn.execute(select(schema.schema_info.c.version)).scalar()
    if version is None:
        raise TuningDBError("not a tuning log: its schema_info table is empty")
    return int(version)


def _refuse_newer(version: int) -> None:
    if version > schema.CURRENT_VERSION:
        raise SchemaVersionError(
            f"the tuning log has schema version {version}, newer than this tuning_db supports "
            f"({schema.CURRENT_VERSION}); upgrade autorelay to use it"
        )


def create_schema(conn: Connection, version: int) -> None:
    """Create all tables as schema `version` defines them and stamp the version."""
    md = schema.metadata_for(version)
    md.create_all(conn)
    conn.execute(md.tables["schema_info"].insert().values(id=1, version=version, updated_at=time.time()))


def _upgrade_1_to_2(conn: Connection) -> None:
    """Add workloads.family (backfilled from the JSON) and the best-query / config indexes."""
    conn.execute(text("ALTER TABLE workloads ADD COLUMN family VARCHAR(128)"))
    w = schema.workloads
    rows = conn.execute(select(w.c.id, w.c.workload).where(w.c.workload.is_not(None))).all()
    updates = []
    for wid, raw in rows:
        try:
            family = json.loads(raw).get("family")
        except (ValueError, AttributeError):
            family = None
        if isinstance(family, str):
            updates.append({"wid": wid, "family": family})
    if updates:
        conn.execute(text("UPDATE workloads SET family = :family WHERE id = :wid"), updates)
    conn.execute(text("DROP INDEX ix_measurements_wt"))
    for index in _indexes_of(
        schema.METADATA, ("ix_measurements_best", "ix_measurements_config", "ix_workloads_family")
    ):
        index.create(conn)


def _upgrade_2_to_3(conn: Connection) -> None:
    """Add the leases table (tuners sharing a log claim configs before measuring them)."""
    schema.metadata_for(3).tables["leases"].create(conn)


def _upgrade_3_to_4(conn: Connection) -> None:
    """Add the quantization_plans table (and its index): precision plans of models, measured."""
    schema.metadata_for(4).tables["quantization_plans"].create(conn)


def _upgrade_4_to_5(conn: Connection) -> None:
    """Add the layout_plans table (and its index): per-layer layout plans of models, measured."""
    schema.metadata_for(5).tables["layout_plans"].create(conn)


def _upgrade_5_to_6(conn: Connection) -> None:
    """Add the experiment_results table (and its index): the rows of `autorelay reproduce`."""
    schema.metadata_for(6).tables["experiment_results"].create(conn)


def _upgrade_6_to_7(conn: Connection) -> None:
    """Add the config_features table: the cost model's features of logged configs, reused on resume."""
    schema.metadata_for(7).tables["config_features"].create(conn)


def _indexes_of(md, names: tuple[str, ...]) -> list[Index]:  # type: ignore[no-untyped-def]
    found = {ix.name: ix for table in md.tables.values() for ix in table.indexes}
    return [found[n] for n in names]


UPGRADES: dict[int, Callable[[Connection], None]] = {
    1: _upgrade_1_to_2,
    2: _upgrade_2_to_3,
    3: _upgrade_3_to_4,
    4: _upgrade_4_to_5,
    5: _upgrade_5_to_6,
    6: _upgrade_6_to_7,
}
