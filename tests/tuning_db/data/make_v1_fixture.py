"""Regenerate `v1.sqlite`: a tuning log written by schema version 1, for the upgrade test.

    python tests/tuning_db/data/make_v1_fixture.py

It creates the tables through the same `metadata_for(1)` code path the migration knows as version 1
and fills them with plain inserts (deterministic: fixed seed, uids and times). The file is committed;
regenerate it only if version 1's definition itself was wrong.
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
from pathlib import Path

import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from tuning_db import schema  # noqa: E402
from tuning_db.migrate import create_schema  # noqa: E402

WORKLOADS = [
    ("conv-56", {"family": "conv2d", "shapes": [[1, 64, 56, 56], [64, 64, 3, 3]], "dtypes": ["float32"] * 2}),
    ("conv-14", {"family": "conv2d", "shapes": [[1, 64, 14, 14], [64, 64, 3, 3]], "dtypes": ["float32"] * 2}),
    ("dense-1", {"family": "dense", "shapes": [[1, 512], [512, 1000]], "dtypes": ["float32"] * 2}),
    ("opaque", None),
]
TARGETS = ["llvm -mcpu=skylake-avx512", "cuda -arch=sm_80"]


def main(out: Path = HERE / "v1.sqlite") -> None:
    out.unlink(missing_ok=True)
    engine = sa.create_engine(f"sqlite:///{out}")
    md = schema.metadata_for(1)
    tw, tt, tc, tm, tr = (md.tables[n] for n in ("workloads", "targets", "configs", "measurements", "runs"))
    rng = random.Random(1)
    t0 = 1_700_000_000.0
    with engine.begin() as conn:
        create_schema(conn, 1)
        conn.execute(
            tr.insert(),
            [
                {
                    "id": 1,
                    "uid": "run" + "0" * 29,
                    "model": "resnet18",
                    "tuner": "xgb",
                    "trial_budget": 32,
                    "status": "finished",
                    "host": "fixture",
                    "started_at": t0,
                    "finished_at": t0 + 600,
                }
            ],
        )
        conn.execute(
            tt.insert(),
            [
                {
                    "id": i + 1,
                    "name": n,
                    "kind": n.split()[0],
                    "fingerprint": json.dumps({"cores": 2}) if i == 0 else None,
                    "created_at": t0,
                }
                for i, n in enumerate(TARGETS)
            ],
        )
        conn.execute(
            tw.insert(),
            [
                {"id": i + 1, "key": k, "workload": schema.canonical_json(w) if w else None, "created_at": t0}
                for i, (k, w) in enumerate(WORKLOADS)
            ],
        )
        cid = mid = 0
        for wid in range(1, len(WORKLOADS) + 1):
            for tile in (1, 2, 4, 8, 16):
                cid += 1
                cfg = schema.canonical_json({"tile": tile, "unroll": tile > 4})
                conn.execute(
                    tc.insert().values(
                        id=cid,
                        workload_id=wid,
                        config_hash=schema.config_hash(cfg),
                        config=cfg,
                        space_index=tile,
                    )
                )
                for tid in (1, 2):
                    mid += 1
                    costs = [rng.uniform(1e-4, 1e-2) for _ in range(3)]
                    failed = tile == 16 and tid == 2
                    mean = sum(costs) / 3
                    std = (sum((c - mean) ** 2 for c in costs) / 3) ** 0.5
                    conn.execute(
                        tm.insert().values(
                            id=mid,
                            uid=f"m{mid:031d}",
                            workload_id=wid,
                            target_id=tid,
                            config_id=cid,
                            run_id=1,
                            costs=json.dumps([] if failed else costs),
                            mean_cost=None if failed else mean,
                            std_cost=None if failed else std,
                            error_kind="timeout" if failed else None,
                            error_msg="timeout 10s" if failed else None,
                            compiler_version="0.0.1",
                            recorded_at=t0 + mid,
                        )
                    )
    engine.dispose()
    con = sqlite3.connect(out)
    con.execute("PRAGMA journal_mode=DELETE")
    con.execute("VACUUM")
    con.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
