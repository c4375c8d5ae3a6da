"""`TuningDB`: the one object users hold. It owns the engine and delegates to the query, import and
merge modules; every method is one short transaction, so many processes can share a log."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
import weakref
from typing import Any

from sqlalchemy import Engine, select, update

from . import experiment_results as results_table
from . import features as features_table
from . import layout_plans as layout_table
from . import leases, queries, schema
from . import plans as plan_table
from .engine import make_engine, read_tx, resolve_url, use_wal, write_tx
from .errors import TuningDBError, one_line
from .ingest import IdCache, get_or_create_workloads, insert_one
from .jsonl import ImportReport, export_jsonl, import_rows, read_lines
from .merge import merge, prune
from .migrate import ensure_schema
from .processes import process_alive
from .records import Record, RunInfo, normalize
from .settings import Settings, settings
from .source import Describe, ScheduleSource, Validate

_OPEN: weakref.WeakSet[TuningDB] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child (a process-pool worker) must not reuse its parent's pooled connections: two
    processes on one SQLite handle or PostgreSQL socket corrupt each other. Drop them, unclosed."""
    for db in list(_OPEN):
        db.engine.dispose(close=False)
        db._ids = IdCache()


os.register_at_fork(after_in_child=_after_fork_in_child)


class TuningDB:
    """A tuning log. Create it with `tuning_db.open(url)`. Safe to share between threads; a forked
    child gets fresh connections automatically."""

    def __init__(self, engine: Engine, url: str) -> None:
        _OPEN.add(self)
        self.engine = engine
        self.url = url  # password hidden: safe to print
        self.upgraded_from: int | None = None
        self._ids = IdCache()

    def __repr__(self) -> str:
        return f"TuningDB({self.url!r})"

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> TuningDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- writing ------------------------------------------------------------------------------

    def record(
        self,
        workload_key: str,
        target: str,
        config: dict[str, Any],
        costs: list[float],
        *,
        workload: dict[str, Any] | None = None,
        error: str | None = None,
        run: int | None = None,
        error_kind: str | None = None,
        space_index: int | None = None,
        target_fingerprint: dict[str, Any] | None = None,
        builder_version: str | None = None,
        runner_version: str | None = None,
        compiler_version: str | None = None,
        recorded_at: float | None = None,
    ) -> int:
        """Log one measurement (all its repeats in `costs`, seconds); returns its id.

        A failed measurement passes `error` (message) and optionally `error_kind` (e.g. "timeout",
        "wrong_result"); its costs may be empty and it never counts for `best()`. `recorded_at`
        (seconds since the epoch, default now): the rows of one interleaved re-measurement share
        one (`queries.latest_batch`)."""
        meas = normalize(
            workload_key,
            target,
            config,
            costs,
            workload=workload,
            error=error,
            error_kind=error_kind,
            run_id=run,
            target_fingerprint=target_fingerprint,
            space_index=space_index,
            builder_version=builder_version,
            runner_version=runner_version,
            compiler_version=compiler_version,
            recorded_at=recorded_at,
        )
        try:
            with write_tx(self.engine) as conn:
                if (
                    run is not None
                    and conn.scalar(select(schema.runs.c.id).where(schema.runs.c.id == run)) is None
                ):
                    raise TuningDBError(f"no tuning run with id {run} in {self.url}")
                return insert_one(conn, meas, self._ids)
        except BaseException:
            self._ids = IdCache()  # ids created in a rolled-back transaction must not be reused
            raise

    def register_workload(self, workload_key: str, workload: dict[str, Any]) -> None:
        """Log a workload's description without a measurement, so lookups can find its neighbours."""
        # normalize() checks the key and the description; the placeholder measurement is never written
        meas = normalize(workload_key, "-", {}, [0.0], workload=workload)
        with write_tx(self.engine) as conn:
            get_or_create_workloads(conn, [meas])

    # ---- claims: tuners sharing the log ---------------------------------------------------------

    def claim(self, workload_key: str, target: str, configs: list[dict[str, Any]], holder: str,
              ttl_s: float = 600.0) -> leases.Claim:
        """Claim configs before measuring them: granted only where the config has no measurement
        and no live lease of another holder. See `leases.py`."""
        with write_tx(self.engine) as conn:
            return leases.claim(conn, workload_key, target, configs, holder, ttl_s)

    def release(self, workload_key: str, target: str, holder: str,
                configs: list[dict[str, Any]] | None = None) -> None:
        """Drop `holder`'s claims on the workload (on `configs`, or all of them)."""
        with write_tx(self.engine) as conn:
            leases.release(conn, workload_key, target, holder, configs)

    # ---- tuning runs --------------------------------------------------------------------------

    def start_run(
        self,
        *,
        model: str | None = None,
        tuner: str | None = None,
        trial_budget: int | None = None,
        info: dict[str, Any] | None = None,
    ) -> int:
        """Open a tuning run (status "running"); pass its id as `record(..., run=id)`. The run's
        info records this process id, so a run whose process was killed outright (kill -9, a
        crash) can be recognised later (`close_dead_runs`)."""
        r = schema.runs
        info = {**(info or {}), "pid": os.getpid()}
        with write_tx(self.engine) as conn:
            return int(
                conn.execute(
                    r.insert()
                    .values(
                        uid=uuid.uuid4().hex,
                        model=model,
                        tuner=tuner,
                        trial_budget=trial_budget,
                        status="running",
                        host=socket.gethostname(),
                        started_at=time.time(),
                        info=schema.canonical_json(info),
                    )
                    .returning(r.c.id)
                ).scalar_one()
            )

    def finish_run(self, run: int, *, interrupted: bool = False) -> None:
        """Close a run as "finished" (or "interrupted", e.g. on Ctrl-C)."""
        self._set_run_status(run, "interrupted" if interrupted else "finished", time.time())

    def update_run(self, run: int, *, info: dict[str, Any]) -> None:
        """Add `info`'s entries to a run's info (replacing those of the same name): what a run learns
        after its first measurements, e.g. how many tasks a plan tune's screening kept."""
        r = schema.runs
        with write_tx(self.engine) as conn:
            row = conn.execute(select(r.c.info).where(r.c.id == run)).first()
            if row is None:
                raise TuningDBError(f"no tuning run with id {run} in {self.url}")
            merged = {**(json.loads(row.info) if row.info else {}), **info}
            conn.execute(update(r).where(r.c.id == run).values(info=schema.canonical_json(merged)))

    def resume_run(self, run: int) -> RunInfo:
        """Mark an interrupted run running again; skip configs `has_measured()` already knows."""
        self._set_run_status(run, "running", None)
        return self.runs(ids=[run])[0]

    def close_dead_runs(self) -> list[int]:
        """Mark "interrupted" every run still "running" that was started on this host by a process
        that no longer exists (killed before it could close the run); returns their ids. Runs of
        other hosts are left alone: their processes cannot be checked from here."""
        host = socket.gethostname()
        dead = []
        for run in self.runs("running"):
            pid = (run.info or {}).get("pid")
            if run.host == host and isinstance(pid, int) and not process_alive(pid):
                dead.append(run.id)
        for rid in dead:
            self._set_run_status(rid, "interrupted", None)
        return dead

    def _set_run_status(self, run: int, status: str, finished_at: float | None) -> None:
        r = schema.runs
        with write_tx(self.engine) as conn:
            done = conn.execute(update(r).where(r.c.id == run).values(status=status, finished_at=finished_at))
            if done.rowcount != 1:
                raise TuningDBError(f"no tuning run with id {run} in {self.url}")

    def runs(self, status: str | None = None, ids: list[int] | None = None) -> list[RunInfo]:
        """Tuning runs (optionally only "running" / "finished" / "interrupted"), oldest first."""
        with read_tx(self.engine) as conn:
            return queries.runs(conn, status, ids)

    def latest_pipeline(self, model_key: str, targets: list[str],
                        model_name: str | None = None) -> tuple[str, str] | None:
        """(pipeline, the run's target) of the latest tuning run of a model on the first of `targets`
        (canonical names, best first) that has one. A run is the model's when it logged `model_key`;
        a run from before keys were logged is matched by its name, when `model_name` is given."""
        def same_model(run: RunInfo, info: dict[str, Any]) -> bool:
            return info["model_key"] == model_key if "model_key" in info else run.model == model_name

        runs = [(run, run.info or {}) for run in reversed(self.runs())]
        for target in targets:
            for run, info in runs:
                if (isinstance(info.get("pipeline"), str) and same_model(run, info)
                        and schema.canonical_target(str(info.get("target", ""))) == target):
                    return info["pipeline"], str(info["target"])
        return None

    # ---- reading ------------------------------------------------------------------------------

    def best(self, workload_key: str, target: str, k: int = 1) -> list[Record]:
        if k < 1:
            raise TuningDBError(f"k must be at least 1, got {k}")
        with read_tx(self.engine) as conn:
            return queries.best(conn, workload_key, target, k)

    def pick(self, workload_key: str, target: str) -> Record | None:
        """The config a build should use: the winner of the workload's latest interleaved
        re-measurement (rows logged with runner_version `INTERLEAVED`), else its fastest
        measurement; None when nothing succeeded. See `queries.pick`."""
        with read_tx(self.engine) as conn:
            return queries.pick(conn, workload_key, target)

    def history(self, workload_key: str, target: str) -> list[Record]:
        with read_tx(self.engine) as conn:
            return queries.history(conn, workload_key, target)

    def has_measured(self, workload_key: str, target: str, config: dict[str, Any]) -> bool:
        with read_tx(self.engine) as conn:
            return queries.has_measured(conn, workload_key, target, config)

    def stats(self) -> dict[str, Any]:
        with read_tx(self.engine) as conn:
            return queries.stats(conn)

    def workload(self, workload_key: str) -> dict[str, Any] | None:
        """The logged description of a workload, if any."""
        w = schema.workloads
        with read_tx(self.engine) as conn:
            raw = conn.scalar(select(w.c.workload).where(w.c.key == workload_key))
        return json.loads(raw) if raw else None

    def schedule_source(
        self, target: str = "llvm", *, validate: Validate | None = None, describe: Describe | None = None
    ) -> ScheduleSource:
        """The lookup object for `autorelay.build(..., schedules=...)`; `target` a kind (``llvm``:
        whatever CPU target the build asks about) or one full target name. See `tuning_db.source`."""
        return ScheduleSource(self, target, validate=validate, describe=describe)

    # ---- the cost model's features of configs (see features.py) -------------------------------

    def features(self, workload_key: str, target: str, version: str) -> dict[str, features_table.Vector]:
        """config hash -> stored feature vector (None: illegal) of a workload on a target."""
        with read_tx(self.engine) as conn:
            return features_table.load_features(conn, workload_key, target, version)

    def store_features(self, workload_key: str, target: str, version: str,
                       vectors: dict[str, Any]) -> int:
        """Store feature vectors by config hash (`schema.config_hash` of the canonical config JSON)."""
        with write_tx(self.engine) as conn:
            return features_table.insert_features(conn, workload_key, target, version, vectors)

    # ---- quantization plans (see plans.py) ------------------------------------------------------

    def store_plan(self, model_key: str, target: str, plan: dict[str, Any], **fields: Any) -> int:
        """Store one measured quantization plan (`plans.insert_plan` names and checks the fields:
        calibration, latency_ms, metric, accuracy, accuracy_drop, and the optional baseline); returns
        its id."""
        with write_tx(self.engine) as conn:
            return plan_table.insert_plan(conn, model_key=model_key, target=target, plan=plan, **fields)

    def plans(self, model_key: str | None = None, target: str | None = None) -> list[plan_table.PlanRecord]:
        """Stored quantization plans (of one model and/or target), fastest first."""
        with read_tx(self.engine) as conn:
            return plan_table.list_plans(conn, model_key, target)

    def best_plan(self, model_key: str, target: str,
                  max_drop: float | None = None) -> plan_table.PlanRecord | None:
        """The fastest stored plan losing at most `max_drop`, or (no bound) the latest search's pick."""
        with read_tx(self.engine) as conn:
            return plan_table.best_plan(conn, model_key, target, max_drop)

    def plan_targets(self, model_key: str) -> list[str]:
        """Targets with stored quantization plans for the model."""
        with read_tx(self.engine) as conn:
            return plan_table.plan_targets(conn, model_key)

    # ---- layout plans (see layout_plans.py) ---------------------------------------------------

    def store_layout_plan(self, model_key: str, target: str, plan: dict[str, Any], **fields: Any) -> int:
        """Store one measured layout plan (fields: latency_ms, model, chosen, info, compiler_version)."""
        with write_tx(self.engine) as conn:
            return layout_table.insert_layout_plan(conn, model_key=model_key, target=target, plan=plan,
                                                   **fields)

    def layout_plan(self, model_key: str, target: str) -> layout_table.LayoutPlanRecord | None:
        """The latest layout search's row for the model on the target."""
        with read_tx(self.engine) as conn:
            return layout_table.latest_layout_plan(conn, model_key, target)

    def layout_plans(self, model: str | None = None,
                     target: str | None = None) -> list[layout_table.LayoutPlanRecord]:
        """Stored layout plans (of a model, by name or key, and/or a target), newest first."""
        with read_tx(self.engine) as conn:
            return layout_table.list_layout_plans(conn, model, target)

    # ---- experiment results (see experiment_results.py) ---------------------------------------

    def store_experiment_result(self, experiment: str, mode: str, unit: str, machine: str,
                                result: dict[str, Any], **fields: Any) -> str:
        """Store one measured unit of an `autorelay reproduce` experiment (fields: machine_info,
        code_version); returns its uid."""
        with write_tx(self.engine) as conn:
            return results_table.insert_result(conn, experiment=experiment, mode=mode, unit=unit,
                                               machine=machine, result=result, **fields)

    def experiment_results(self, experiment: str, mode: str,
                           machine: str | None = None) -> list[results_table.ExperimentResult]:
        """The latest row of every unit of an experiment in a mode (of one machine, or all)."""
        with read_tx(self.engine) as conn:
            return results_table.latest_results(conn, experiment, mode, machine)

    # ---- files and other logs -----------------------------------------------------------------

    def export_jsonl(self, path: str | os.PathLike[str]) -> int:
        """Write every measurement as one JSON line; returns the number of lines."""
        return export_jsonl(self.engine, path)

    def import_jsonl(self, path: str | os.PathLike[str], *, strict: bool = False) -> ImportReport:
        """Import a JSON-lines file. Bad lines are reported by number and skipped; with `strict`,
        any bad line imports nothing and raises `JSONLImportError` (its `.report` lists them)."""
        return import_rows(self.engine, read_lines(path), source=os.fspath(path), strict=strict)

    def merge_from(self, other: str | os.PathLike[str] | TuningDB) -> ImportReport:
        """Copy in every measurement and experiment result of another log that this one lacks (by uid)."""
        if isinstance(other, TuningDB):
            return merge(self.engine, other.engine, source=other.url)
        with open_db(other) as src:
            return merge(self.engine, src.engine, source=src.url)

    def prune(self, keep_best: int, *, dry_run: bool = False, keep_errors: bool = True) -> dict[str, int]:
        """Keep only the `keep_best` fastest configs per (workload, target), and failed measurements
        unless `keep_errors` is False (they stop a resumed tuner retrying a crashing config);
        returns deleted counts."""
        return prune(self.engine, keep_best, dry_run=dry_run, keep_errors=keep_errors)



def open_db(url: str | os.PathLike[str] | None = None, *, config: Settings | None = None) -> TuningDB:
    """Open (creating or upgrading as needed) a tuning log. `url`: None for the default SQLite file,
    a file path, `sqlite:///PATH`, or `postgresql://USER@HOST:PORT/DB`."""
    cfg = config or settings()
    parsed = resolve_url(url, cfg)
    engine = make_engine(parsed, cfg)
    shown = parsed.render_as_string(hide_password=True)
    try:
        before = ensure_schema(engine)
        use_wal(engine)
    except TuningDBError:
        engine.dispose()
        raise
    except Exception as e:
        engine.dispose()
        raise TuningDBError(f"cannot open tuning log {shown}: {one_line(e)}") from None
    db = TuningDB(engine, shown)
    db.upgraded_from = before if 0 < before < schema.CURRENT_VERSION else None
    return db
