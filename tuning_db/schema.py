"""The tables of the tuning log, for every schema version this code knows.

Versions:
  1. the first release: targets, workloads, configs, runs, measurements, schema_info; one index
     on measurements(workload_id, target_id).
  2. adds `workloads.family` (the op family, backfilled from the workload JSON) so the schedule
     source can find the nearest workload of the same family without parsing every row, and
     replaces the version-1 index by `(workload_id, target_id, mean_cost, id)` so `best()` reads the
     cheapest rows straight off an index; adds an index on measurements(config_id) for resume.
  3. adds `leases`: a claim on one (workload, target, config) by one tuner until `expires_at`, so
     tuners sharing a log never measure a config twice (see `leases.py`).
  4. adds `quantization_plans`: per-layer precision plans of a model on a target, each with the
     end-to-end latency and accuracy measured for it and the fp32 baseline measured beside it
     (see `plans.py`; written by `search.quantize_search`).
  5. adds `layout_plans`: per-layer layout plans (a channel block per conv) of a model on a target,
     with the plan's measured latency and the per-model pipelines timed beside it (`layout_plans.py`).
  6. adds `experiment_results`: the measured rows of `autorelay reproduce` experiments, tagged with
     the experiment, its mode, the machine and the code version (`experiment_results.py`).
  7. adds `config_features`: the cost model's feature vector of a config lowered on a workload for
     a target, under a features version, so a resumed tune reads them instead of lowering every
     logged config again (`features.py`).

`metadata_for(version)` builds the tables as that version had them; the migration code creates a
version-1 database through the same function, so the upgrade test exercises a real old layout.
JSON values are stored as canonical text (sorted keys, no spaces): identical configs hash alike and
the database stays readable from any SQL shell.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

CURRENT_VERSION = 7
TABLE_NAMES = (
    "schema_info", "targets", "workloads", "configs", "runs", "measurements", "leases", "quantization_plans",
    "layout_plans", "experiment_results", "config_features",
)
MAX_KEY_LEN = 512


def metadata_for(version: int) -> MetaData:
    """All tables as schema `version` defines them (1 .. CURRENT_VERSION)."""
    if version not in range(1, CURRENT_VERSION + 1):
        raise ValueError(f"unknown tuning_db schema version {version}")
    md = MetaData()
    Table(
        "schema_info",
        md,
        Column("id", Integer, primary_key=True),
        Column("version", Integer, nullable=False),
        Column("updated_at", Float, nullable=False),
    )
    Table(
        "targets",
        md,
        Column("id", Integer, primary_key=True),
        Column("name", String(MAX_KEY_LEN), nullable=False, unique=True),
        Column("kind", String(64), nullable=False),
        Column("fingerprint", Text),
        Column("created_at", Float, nullable=False),
    )
    workload_cols = [
        Column("id", Integer, primary_key=True),
        Column("key", String(MAX_KEY_LEN), nullable=False, unique=True),
        Column("workload", Text),
        Column("created_at", Float, nullable=False),
    ]
    if version >= 2:
        workload_cols.insert(2, Column("family", String(128)))
    workloads = Table("workloads", md, *workload_cols)
    Table(
        "configs",
        md,
        Column("id", Integer, primary_key=True),
        Column("workload_id", Integer, ForeignKey("workloads.id"), nullable=False),
        Column("config_hash", String(64), nullable=False),
        Column("config", Text, nullable=False),
        Column("space_index", BigInteger),
        UniqueConstraint("workload_id", "config_hash", name="uq_configs_workload_hash"),
    )
    Table(
        "runs",
        md,
        Column("id", Integer, primary_key=True),
        Column("uid", String(32), nullable=False, unique=True),
        Column("model", String(256)),
        Column("tuner", String(128)),
        Column("trial_budget", Integer),
        Column("status", String(16), nullable=False),
        Column("host", String(256)),
        Column("started_at", Float, nullable=False),
        Column("finished_at", Float),
        Column("info", Text),
    )
    meas = Table(
        "measurements",
        md,
        Column("id", Integer, primary_key=True),
        Column("uid", String(32), nullable=False, unique=True),
        Column("workload_id", Integer, ForeignKey("workloads.id"), nullable=False),
        Column("target_id", Integer, ForeignKey("targets.id"), nullable=False),
        Column("config_id", Integer, ForeignKey("configs.id"), nullable=False),
        Column("run_id", Integer, ForeignKey("runs.id")),
        Column("costs", Text, nullable=False),
        Column("mean_cost", Float),
        Column("std_cost", Float),
        Column("error_kind", String(64)),
        Column("error_msg", Text),
        Column("builder_version", String(64)),
        Column("runner_version", String(64)),
        Column("compiler_version", String(64)),
        Column("recorded_at", Float, nullable=False),
    )
    if version == 1:
        Index("ix_measurements_wt", meas.c.workload_id, meas.c.target_id)
    else:
        # id last: best() orders by (mean_cost, id), and PostgreSQL can then read the order off the
        # index instead of sorting every row of the workload (SQLite has the rowid there implicitly)
        Index("ix_measurements_best", meas.c.workload_id, meas.c.target_id, meas.c.mean_cost, meas.c.id)
        Index("ix_measurements_config", meas.c.config_id)
        Index("ix_workloads_family", workloads.c.family)
    if version >= 3:
        Table(
            "leases",
            md,
            Column("id", Integer, primary_key=True),
            Column("workload_key", String(MAX_KEY_LEN), nullable=False),
            Column("target", String(MAX_KEY_LEN), nullable=False),
            Column("config_hash", String(64), nullable=False),
            Column("holder", String(128), nullable=False),
            Column("expires_at", Float, nullable=False),
            UniqueConstraint("workload_key", "target", "config_hash", name="uq_leases_config"),
        )
    if version >= 4:
        plans = Table(
            "quantization_plans",
            md,
            Column("id", Integer, primary_key=True),
            Column("uid", String(32), nullable=False, unique=True),
            Column("model_key", String(MAX_KEY_LEN), nullable=False),  # autorelay.lower.model_key
            Column("model", String(256)),  # the name the user gave (zoo name, file name)
            Column("target", String(MAX_KEY_LEN), nullable=False),  # canonical, threads included
            Column("plan", Text, nullable=False),  # canonical JSON of the QuantizePlan
            Column("calibration", String(64), nullable=False),  # "max" | "percentile" | "kl"
            Column("latency_ms", Float, nullable=False),  # median of the end-to-end timing
            Column("latency_lo_ms", Float),  # spread: 10th / 90th percentile of the timing rounds
            Column("latency_hi_ms", Float),
            Column("metric", String(32), nullable=False),  # "top1" | "rel_error"
            Column("accuracy", Float, nullable=False),  # the metric's value for this plan
            Column("accuracy_drop", Float, nullable=False),  # lost against fp32 (> 0: worse)
            Column("max_drop", Float),  # the bound of the search that stored it
            Column("fp32_latency_ms", Float),  # the fp32 build, timed in the same rounds
            Column("fp32_accuracy", Float),  # the metric of the fp32 model on the same data
            Column("chosen", Integer, nullable=False, default=0),  # 1: its search's pick
            Column("compiler_version", String(64)),
            Column("info", Text),  # JSON: pipeline, trials, validation source, ...
            Column("recorded_at", Float, nullable=False),
        )
        Index("ix_quantization_plans_model", plans.c.model_key, plans.c.target, plans.c.latency_ms)
    if version >= 5:
        layout = Table(
            "layout_plans",
            md,
            Column("id", Integer, primary_key=True),
            Column("uid", String(32), nullable=False, unique=True),
            Column("model_key", String(MAX_KEY_LEN), nullable=False),  # autorelay.lower.model_key
            Column("model", String(256)),  # the name the user gave
            Column("target", String(MAX_KEY_LEN), nullable=False),  # canonical, threads included
            Column("plan", Text, nullable=False),  # canonical JSON of the LayoutPlan
            Column("latency_ms", Float, nullable=False),  # the plan's build, timed end to end
            Column("chosen", Integer, nullable=False, default=0),  # 1: faster than every per-model pick
            Column("compiler_version", String(64)),
            Column("info", Text),  # JSON: per-layer costs, per-model latencies, the winner, ...
            Column("recorded_at", Float, nullable=False),
        )
        Index("ix_layout_plans_model", layout.c.model_key, layout.c.target, layout.c.recorded_at)
    if version >= 6:
        results = Table(
            "experiment_results",
            md,
            Column("id", Integer, primary_key=True),
            Column("uid", String(32), nullable=False, unique=True),
            Column("experiment", String(128), nullable=False),  # `autorelay reproduce` name
            Column("mode", String(64), nullable=False),  # "quick" | "full", with the thread count
            Column("unit", String(MAX_KEY_LEN), nullable=False),  # one measured piece of the experiment
            Column("machine", String(64), nullable=False),  # fingerprint of the measuring machine
            Column("machine_info", Text),  # JSON: CPU name, LLVM cpu, cores, host
            Column("code_version", String(64)),
            Column("result", Text, nullable=False),  # JSON object: the unit's figures
            Column("recorded_at", Float, nullable=False),
        )
        Index("ix_experiment_results_unit", results.c.experiment, results.c.mode, results.c.machine,
              results.c.unit, results.c.recorded_at)
    if version >= 7:
        # keyed by text like `leases`: a transferred config is featurized on a workload it was never
        # measured on, so there is no configs row to point at
        Table(
            "config_features",
            md,
            Column("id", Integer, primary_key=True),
            Column("workload_key", String(MAX_KEY_LEN), nullable=False),
            Column("target", String(MAX_KEY_LEN), nullable=False),  # canonical
            Column("version", String(64), nullable=False),  # of the feature definition
            Column("config_hash", String(64), nullable=False),  # `config_hash` of the canonical JSON
            Column("features", Text, nullable=False),  # JSON list of numbers; null: illegal schedule
            Column("recorded_at", Float, nullable=False),
            UniqueConstraint("workload_key", "target", "version", "config_hash", name="uq_config_features"),
        )
    return md


METADATA = metadata_for(CURRENT_VERSION)
schema_info = METADATA.tables["schema_info"]
targets = METADATA.tables["targets"]
workloads = METADATA.tables["workloads"]
configs = METADATA.tables["configs"]
runs = METADATA.tables["runs"]
measurements = METADATA.tables["measurements"]
leases = METADATA.tables["leases"]
quantization_plans = METADATA.tables["quantization_plans"]
layout_plans = METADATA.tables["layout_plans"]
experiment_results = METADATA.tables["experiment_results"]
config_features = METADATA.tables["config_features"]


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: equal values give equal text (and hashes). Raises on NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def config_hash(config_json: str) -> str:
    return hashlib.sha256(config_json.encode()).hexdigest()


@lru_cache(maxsize=1024)
def canonical_target(target: str) -> str:
    """`llvm  -mcpu=x -mattr=+a` and `llvm -mattr=+a -mcpu=x` name the same target: the kind first,
    then its options sorted, single-spaced. Keeps the log from splitting one target into two."""
    parts = str(target).split()
    if not parts:
        return ""
    return " ".join([parts[0], *sorted(parts[1:])])


def target_kind(target: str) -> str:
    return target.split(" ", 1)[0] if target else ""
