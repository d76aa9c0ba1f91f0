"""The results store locked by another process (issue 34, cause 4; M3): a write waits the lock
out with a line every 10 s, and where it stays locked past BENCHC_STORE_WAIT_S a run's result
is kept in its metrics file (said, with the `benchc ingest` that stores it later), nothing
more is started, and benchc exits 3, never with a hint that the store is damaged."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from scripted_points import PRELUDE, ok_metrics, scripted_point

from benchc.results.store import Store

from helpers import REPO

pytestmark = pytest.mark.integration

# holds the store's write lock from when the run's row exists until it is killed
HOLDER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
while not db.execute("SELECT count(*) FROM runs").fetchone()[0]:
    time.sleep(0.05)
db.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(120)
"""


def test_a_run_whose_store_stays_locked_keeps_its_result_for_ingest(tmp_path):
    db = tmp_path / "r.db"
    with Store(db):
        pass  # made, empty
    point = scripted_point(tmp_path, "")
    # the metrics name the build's point, as a program's do: ingest stores them under it
    name = json.loads((point / "manifest.json").read_text())["point"]
    body = (
        "for n in range(1, 6):\n    step(n, seconds=0.4)\n"  # the holder takes the lock meanwhile
        f"json.dump(json.loads({json.dumps(ok_metrics(point=name))!r}), open(metrics_path, 'w'))\n"
    )
    (point / "bench.py").write_text(PRELUDE + body)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        env = {**os.environ, "BENCHC_STORE_WAIT_S": "11"}
        started = time.monotonic()
        command = [sys.executable, "-m", "benchc", "run", str(point), "--db", str(db), "--repeat", "2"]
        run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
        waited = time.monotonic() - started
        assert holder.stdout.readline().strip() == "held"
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr and "recover" not in run.stderr
    assert "waiting for the results store" in run.stderr and "holds its write lock (10 s)" in run.stderr
    assert "stayed locked by another process for 11 s" in run.stderr
    assert "the remaining runs were not started" in run.stderr
    (kept,) = point.glob("runs/*/metrics.json")
    assert f"`benchc ingest {kept}`" in run.stderr
    assert 11 <= waited < 60
    ingest = subprocess.run([sys.executable, "-m", "benchc", "ingest", str(kept), "--db", str(db)], cwd=REPO,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ingest.returncode == 0, ingest.stderr
    with Store(db) as store:
        assert [r.status for r in store.latest_runs(None)] == ["ok"]


def test_a_command_meeting_a_locked_store_says_so_and_exits_3(tmp_path):
    """`run` cannot even record its start: nothing runs, nothing is written, exit 3."""
    db = tmp_path / "r.db"
    with Store(db) as store:
        store.start(experiment="e", target="cpu", point="p", point_values={}, smoke=False, spec_path=None,
                    spec_sha256=None, build_path=None, log_path=None, environment={}, series="s", trial=1,
                    plan=None)  # fmt: skip
    point = scripted_point(tmp_path, "raise SystemExit('this program must not run')\n")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        env = {**os.environ, "BENCHC_STORE_WAIT_S": "1"}
        run = subprocess.run([sys.executable, "-m", "benchc", "run", str(point), "--db", str(db)], cwd=REPO,
                             capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 3, run.stderr
    assert "stayed locked by another process" in run.stderr and "nothing was written" in run.stderr
    assert "Traceback" not in run.stderr and "recover" not in run.stderr
    assert not list(point.glob("runs/*/metrics.json"))
    with sqlite3.connect(db) as read:  # only the row made before
        assert read.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


# waits for the calibration's row (the store made by benchc meanwhile), then holds the lock
CALIBRATION_HOLDER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
while True:
    try:
        if db.execute("SELECT count(*) FROM calibrations").fetchone()[0]:
            break
    except sqlite3.OperationalError:  # no table yet
        pass
    time.sleep(0.05)
db.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(300)
"""


def benchc_run(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchc", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


def test_a_calibration_whose_store_stays_locked_keeps_its_file_for_ingest(tmp_path):
    db = tmp_path / "r.db"
    with Store(db):
        pass  # made, so the holder waits on benchc's row, not on the schema
    holder = subprocess.Popen([sys.executable, "-c", CALIBRATION_HOLDER, str(db)], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        env = {**os.environ, "BENCHC_STORE_WAIT_S": "2"}
        calibrate = benchc_run("calibrate", "--smoke", "-o", str(tmp_path / "cal"), "--db", str(db), env=env)
        assert holder.stdout.readline().strip() == "held"
    finally:
        holder.kill()
        holder.wait()
    err = calibrate.stderr
    assert calibrate.returncode == 3, err
    assert "stayed locked by another process" in err and "Traceback" not in err and "recover" not in err
    (kept,) = (tmp_path / "cal").glob("*/runs/*/calibration.json")
    assert f"`benchc calibrate --ingest {kept}`" in err
    stored = benchc_run("calibrate", "--ingest", str(kept), "--db", str(db), timeout=60)
    assert stored.returncode == 0 and "stored (ok)" in stored.stdout, stored.stderr


# ------------------------------------------------------------------ a store that can only be read


def test_a_store_that_can_only_be_read_is_read_and_a_write_is_refused(tmp_path):
    """A WAL store in a folder this user cannot write (SQLite cannot even make its -shm file
    there): the read commands read it, a write is refused saying why. The commands run as an
    unprivileged user (a user namespace: root reads through permissions)."""
    from report_store import calibrate, store_run
    from system_tools import Unavailable, ensure

    try:
        ensure({"unshare": "util-linux"})
    except Unavailable as exc:
        pytest.fail(f"unshare is required here: {exc}")
    shared = Path(tempfile.mkdtemp(prefix="benchc-ro-", dir="/tmp"))
    try:
        folder = shared / "store"
        folder.mkdir()
        db = folder / "r.db"
        store_run(db, "cpu", 10.0)
        calibrate(db, "cpu", {"fp32": 1.0, "bf16": 2.0}, 0.02)
        metrics = shared / "metrics.json"
        metrics.write_text(json.dumps(ok_metrics()))
        shared.chmod(0o755)
        metrics.chmod(0o644)
        folder.chmod(0o555)
        db.chmod(0o444)

        def unprivileged(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(["unshare", "-U", sys.executable, "-m", "benchc", *args, "--db", str(db)],
                                  cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip

        listed = unprivileged("runs")
        assert listed.returncode == 0 and "sd3_mmdit_train" in listed.stdout, listed.stderr
        shown = unprivileged("targets")
        assert shown.returncode == 0 and "cpu: bf16 2" in shown.stdout, shown.stderr
        refused = unprivileged("ingest", str(metrics))
        assert refused.returncode == 2 and "can only be read here" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr + listed.stderr + shown.stderr
    finally:
        for path in (shared, *shared.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)
        shutil.rmtree(shared)
