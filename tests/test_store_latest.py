"""Store.latest_runs, the store query a report reads, selects exactly the runs that
report.collect.sections() would keep of the whole store: for each (experiment, smoke, point,
target) every run of the series of its latest ended run. Checked on random stores (ties in
start time, running and pending runs, series shared across rows), through the indexes and
through the plain query a read-only store without them uses."""

from __future__ import annotations

import random
import sqlite3
from collections import defaultdict

import pytest

from benchc.results.store import Store


def kept_by_sections(runs):
    """The selection sections() makes of runs() (ordered by start time, then id)."""
    latest = {}
    for run in runs:
        if run.status not in ("running", "pending"):
            latest[(run.experiment, run.smoke, run.point, run.target)] = run.series
    return [r for r in runs if latest.get((r.experiment, r.smoke, r.point, r.target)) == r.series]


def random_store(path, seed: int) -> None:
    chance = random.Random(seed)
    with Store(path) as store, store.batch():
        for index in range(300):
            experiment = chance.choice(["a", "b"])
            status = chance.choice(["ok", "ok", "failed", "interrupted", "running", "pending"])
            run_id = store.start(
                experiment=experiment, target=chance.choice(["cpu", "h100"]),
                point=chance.choice(["p1", "p2", "p3"]), point_values={}, smoke=chance.random() < 0.3,
                spec_path=None, spec_sha256=None, build_path=None, log_path=None, environment={},
                plan=None, series=f"s{chance.randrange(40)}", trial=1,
                source="submit" if status == "pending" else "run",
                status="pending" if status == "pending" else "running",
                # a coarse clock: many runs share a start time, the id then decides
                started_at=f"2026-12-0{chance.randrange(1, 4)}T00:00:0{chance.randrange(3)}Z",
                run_id=f"{index:04d}-{chance.randrange(10**6):06d}",
            )  # fmt: skip
            if status not in ("running", "pending"):
                store.finish(run_id, status, None, None)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("indexed", [True, False])
def test_latest_runs_selects_what_sections_keeps(tmp_path, seed, indexed):
    path = tmp_path / "r.db"
    random_store(path, seed)
    with Store(path) as store:
        store._indexed = indexed  # False: the query of a read-only store made without indexes
        everything = store.runs()
        for experiment in (None, "a", "b"):
            expected = kept_by_sections([r for r in everything if experiment in (None, r.experiment)])
            assert [r.id for r in store.latest_runs(experiment)] == [r.id for r in expected]
        assert store.targets() == {r.target for r in everything}
        assert store.targets("a") == {r.target for r in everything if r.experiment == "a"}
    keys = defaultdict(set)
    for r in kept_by_sections(everything):
        keys[(r.experiment, r.smoke, r.point, r.target)].add(r.series)
    assert keys and all(len(series) == 1 for series in keys.values())  # one series per row


def test_a_store_without_the_indexes_gets_them_when_opened(tmp_path):
    path = tmp_path / "r.db"
    random_store(path, 0)
    with sqlite3.connect(path) as db:
        db.execute("DROP INDEX runs_latest")
    with Store(path) as store:
        assert store._indexed
    with sqlite3.connect(path) as db:
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"runs_latest", "runs_by_series", "runs_by_status"} <= names
