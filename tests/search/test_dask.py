"""The Dask executor on a LocalCluster of worker processes: a tiny task tuned end to end into a SQLite
log, faults (a segfault, a hang) recorded as failures while the tune goes on, and `--executor`."""

from __future__ import annotations

import itertools
import time

import pytest

distributed = pytest.importorskip("distributed")

from search_helpers import Faults, dense_task  # noqa: E402

from search.measure import ErrorKind, MeasureInput, Measurer, TimingSettings  # noqa: E402
from search.measure.dask_executor import DaskMeasurer, make_measurer, parse_dask_address  # noqa: E402
from search.tune import REMEASURE_TAG, tune_task  # noqa: E402
from search.tuners import make_tuner  # noqa: E402

FAST = TimingSettings(number=1, repeat=3, min_repeat_ms=2.0, warmup=1, timeout=3.0)


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                  silence_logs=40) as c, distributed.Client(c) as client:
        yield c, client


@pytest.fixture(scope="module")
def task():
    return dense_task(16, 24, 32)


def _workers(client) -> set[str]:
    return set(client.scheduler_info()["workers"])


def test_tune_end_to_end_matches_the_local_measurer(cluster, task, tmp_path):
    import tuning_db

    c, client = cluster
    before = _workers(client)
    db = tuning_db.open(f"sqlite:///{tmp_path / 'log.db'}")
    with distributed.get_task_stream(client) as stream, DaskMeasurer(c, FAST) as m:
        res = tune_task(task, make_tuner("random", task, seed=1), 6, db, m, batch=3, top_k=2, rounds=3)
        inputs = [MeasureInput(task.config(i), i) for i in (0, len(task.space) // 2, len(task.space) - 1)]
        remote = m.measure(task, inputs)
    assert res.trials == 6 and res.best_config is not None
    assert 0 < res.best_cost < 0.1 and 0 < res.default_cost < 0.1
    rows = db.history(task.key, str(task.target))
    searched = [r for r in rows if r.runner_version != REMEASURE_TAG]
    assert len(searched) == 6 and all(r.error_kind is None and len(r.costs) == 3 for r in searched)
    assert any(r.runner_version == REMEASURE_TAG for r in rows)
    db.close()
    # the work really went through the cluster: builds and timings were Dask tasks on both workers
    names = {t["key"].split("-")[0] if isinstance(t["key"], str) else str(t["key"]) for t in stream.data}
    assert any("remote_build" in n for n in names) and any("remote_timed" in n for n in names), names
    assert len({t["worker"] for t in stream.data}) == 2
    with Measurer(build_workers=1, settings=FAST) as local:
        here = local.measure(task, inputs)
    for r, h in zip(remote, here):
        assert r.error is h.error is ErrorKind.NONE, r.message
        assert len(r.costs) == len(h.costs) == 3 and r.extra["features"] == h.extra["features"]
        # same kernel, same machine: the timings agree to within noise (a factor, not a digit)
        assert 0.2 < r.median / h.median < 5.0
    assert _workers(client) == before  # no Dask worker was lost or replaced


def test_crash_and_hang_are_failures_and_the_tune_goes_on(cluster, task, tmp_path):
    import tuning_db

    _, client = cluster
    before = _workers(client)
    # grid order: index 1 has unroll_k 2 (segfaults), index 2 unroll_k 4 (hangs), 0 and 3 are fine
    hook = Faults(((2, "segv"), (4, "hang")), knob="unroll_k")
    settings = TimingSettings(number=1, repeat=2, min_repeat_ms=1.0, warmup=0, timeout=2.0)
    db = tuning_db.open(f"sqlite:///{tmp_path / 'faults.db'}")
    with DaskMeasurer(client, settings, hook=hook) as m:
        res = tune_task(task, make_tuner("grid", task), 4, db, m, batch=4, top_k=2, rounds=2)
        after = m.measure(task, [MeasureInput(task.config(3), 3)])  # still measuring after the faults
    kinds = {r.space_index: r.error_kind for r in db.history(task.key, str(task.target))
             if r.runner_version != REMEASURE_TAG}
    db.close()
    assert kinds == {0: None, 1: "runtime_crash", 2: "timeout", 3: None}
    assert res.errors == {"runtime_crash": 1, "timeout": 1}
    assert res.best_config in (task.config(0), task.config(3), task.default)
    assert after[0].ok
    assert _workers(client) == before  # the candidates died in children, not the Dask workers
    assert client.status == "running"


def _busy_interval(task, _config, _cache_dir, seconds):  # runs in a runner child (module level: pickles)
    t0 = time.time()
    time.sleep(seconds)
    return t0, time.time()


def test_timings_on_one_host_never_overlap(cluster, task):
    """Four timed jobs submitted at once to two workers on this host run one after another."""
    _, client = cluster
    with distributed.get_task_stream(client) as stream, DaskMeasurer(client, FAST) as m:
        outs = m._timed(task, [(_busy_interval, (None, 0.3), 5.0)] * 4)
    assert [o.status for o in outs] == ["ok"] * 4, outs
    spans = sorted(o.value for o in outs)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    assert len({t["worker"] for t in stream.data if "remote_timed" in str(t["key"])}) == 2


def test_segfault_message_names_the_signal(cluster, task):
    _, client = cluster
    hook = Faults(((2, "segv"),), knob="unroll_k")
    settings = TimingSettings(number=1, repeat=2, min_repeat_ms=1.0, warmup=0, timeout=2.0)
    with DaskMeasurer(client, settings, hook=hook) as m:
        res = m.measure(task, [MeasureInput(task.config(1), 1), MeasureInput(task.config(0), 0)])
    assert res[0].error is ErrorKind.RUNTIME_CRASH and "SIGSEGV" in res[0].message
    assert res[1].ok


def test_executor_addresses_are_checked():
    assert parse_dask_address("dask://10.0.0.5:8786") == "tcp://10.0.0.5:8786"
    for bad in ("dask://host", "dask://:8786", "dask://host:port", "tcp://host:8786", "dask://h:99999"):
        with pytest.raises(ValueError, match="dask://HOST:PORT"):
            parse_dask_address(bad)
    with pytest.raises(ValueError, match="unknown executor 'ray://x:1'"):
        make_measurer("ray://x:1")
    with make_measurer("local", build_workers=1) as m:
        assert isinstance(m, Measurer)


def test_cli_executor_flag_reaches_the_cluster(cluster, tmp_path, capsys):
    import tuning_db
    from search.cli import build_parser, main

    c, client = cluster
    host_port = c.scheduler_address.removeprefix("tcp://")
    args = build_parser().parse_args(["tune", "--model", "mlp", "--trials", "2", "--executor",
                                      f"dask://{host_port}"])
    assert args.executor == f"dask://{host_port}"
    assert build_parser().parse_args(["tune", "--model", "mlp", "--trials", "2"]).executor is None
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with distributed.get_task_stream(client) as stream:
        rc = main(["tune", "--model", "mlp", "--trials", "2", "--tuner", "random", "--threads", "1",
                   "--no-compare", "--db", url, "--executor", f"dask://{host_port}"])
    assert rc == 0, capsys.readouterr().err
    assert sum("remote_timed" in str(t["key"]) for t in stream.data) >= 2
    with tuning_db.open(url) as db:
        assert db.runs()[-1].status == "finished"
    assert main(["tune", "--model", "mlp", "--trials", "2", "--db", url, "--executor", "dask://nohost"]) == 1
    assert "dask://HOST:PORT" in capsys.readouterr().err
