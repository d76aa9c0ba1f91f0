"""Hostile input to the commands that run and store: specs that are devices, FIFOs or pipes,
tampered manifests beside a build point or a metrics file, and numeric flags out of range.
Each ends with exit 2 and a clear message, within seconds, never a traceback or a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_points import ok_metrics, scripted_point

from benchc.results.store import Store

from helpers import REPO

pytestmark = pytest.mark.integration


def benchc(*args: str, stdin=None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchc", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, stdin=stdin)  # fmt: skip


def refused(proc: subprocess.CompletedProcess, words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert words in proc.stderr, proc.stderr


# ---------------------------------------------------------------- specs that never end


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_as_a_spec_is_refused_unread(device):
    refused(benchc("check", device, timeout=20), "not a regular file")


def test_a_pipe_as_a_spec_is_refused_unread():
    feeder = subprocess.Popen(["yes", "x"], stdout=subprocess.PIPE)
    try:
        refused(benchc("check", "/dev/stdin", stdin=feeder.stdout, timeout=20), "not a regular file")
    finally:
        feeder.kill()
        feeder.wait()


def test_a_fifo_as_a_spec_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "s.bench"
    os.mkfifo(fifo)
    refused(benchc("check", str(fifo), timeout=20), "not a regular file")


# ---------------------------------------------------------------- tampered manifests


def tamper(manifest: dict, how: str) -> str:
    if how == "list":
        return "[]"
    if how == "string":
        return '"x"'
    if how == "latin-1":
        return json.dumps(manifest).replace('"cpu"', '"c\u00e9u"').encode("latin-1").decode("latin-1")
    if how == "no spec":
        manifest.pop("spec")
    elif how == "spec is a number":
        manifest["spec"] = 5
    elif how == "nodes is text":
        manifest["plan"].setdefault("cluster", {})["nodes"] = "two"
    elif how == "repeat is huge":
        manifest["plan"].setdefault("measure", {})["repeat"] = 10**18
    elif how == "experiment is a path":
        manifest["experiment"] = "../../etc"
    return json.dumps(manifest)


HOW = ["list", "string", "latin-1", "no spec", "spec is a number", "nodes is text", "repeat is huge",
       "experiment is a path"]  # fmt: skip


@pytest.fixture(scope="module")
def point(tmp_path_factory) -> Path:
    return scripted_point(tmp_path_factory.mktemp("tamper"), "step(1, 1)\n")


@pytest.mark.parametrize("how", HOW)
def test_run_of_a_build_point_with_a_tampered_manifest_is_refused(point, tmp_path, how):
    manifest_path = point / "manifest.json"
    original = manifest_path.read_bytes()
    try:
        text = tamper(json.loads(original), how)
        manifest_path.write_bytes(text.encode("latin-1" if how == "latin-1" else "utf-8"))
        db = tmp_path / "r.db"
        proc = benchc("run", str(point), "--db", str(db))
        refused(proc, "manifest")
        assert str(manifest_path) in proc.stderr or "manifest.json" in proc.stderr
        assert not db.exists() or Store(db).runs() == []  # nothing half stored
    finally:
        manifest_path.write_bytes(original)


@pytest.mark.parametrize("how", HOW)
def test_ingest_beside_a_tampered_manifest_stores_the_metrics_without_a_traceback(tmp_path, how):
    """The metrics file carries everything a stored run needs; a damaged manifest beside it
    only loses the plan (shown as such), never the run."""
    manifest = {"manifest_version": 1, "experiment": "e", "target": "cpu", "point": "default",
                "smoke": True, "spec": {"path": "s.bench", "sha256": "0" * 64}, "plan": {},
                "files": []}  # fmt: skip
    (tmp_path / "manifest.json").write_bytes(
        tamper(manifest, how).encode("latin-1" if how == "latin-1" else "utf-8")
    )
    (tmp_path / "metrics.json").write_text(json.dumps(ok_metrics(12.0)))
    db = tmp_path / "r.db"
    proc = benchc("ingest", str(tmp_path / "metrics.json"), "--db", str(db))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (run,) = Store(db).runs()
    assert run.status == "ok" and run.metrics["throughput"]["job"] == 12.0


# ---------------------------------------------------------------- numeric flags


@pytest.mark.parametrize("flag, value, words", [
    ("--timeout", "nan", "positive number of seconds"), ("--timeout", "inf", "positive number of seconds"),
    ("--timeout", "-5", "positive number of seconds"), ("--timeout", "1e12", "a week"),
    ("--repeat", "99999999999999999999", "from 1 to 100"), ("--repeat", "0", "from 1 to 100"),
    ("--repeat", "2.5", "whole number"),
])  # fmt: skip
def test_numeric_flags_of_run_are_finite_positive_and_bounded(point, flag, value, words):
    refused(benchc("run", str(point), flag, value, "--db", "/nonexistent/never.db"), words)


def test_submit_and_plan_flags_are_bounded():
    refused(benchc("submit", "specs/sd3.bench", "--repeat", "1e20"), "whole number")
    refused(benchc("check", "specs/sd3.bench", "--max-points", "0"), "from 1 to")


def test_smoke_says_which_of_the_users_settings_it_replaced():
    proc = benchc("check", "specs/sd3.bench", "--smoke", "--set", "train.steps=400", "--set", "train.seed=7")
    assert proc.returncode == 0, proc.stderr
    assert "--smoke replaced --set train.steps=400: the smoke run uses train.steps = 5" in proc.stderr
    assert "train.seed" not in proc.stderr  # kept as set: nothing to say


# ---------------------------------------------------------------- programs that write bad metrics


@pytest.mark.parametrize("written", [
    {"status": "ok"},
    {"schema": "benchc-metrics", "status": "ok", "error": "boom"},
    "[1, 2",
])  # fmt: skip
def test_a_program_writing_invalid_metrics_is_stored_as_failed_and_the_report_renders(tmp_path, written):
    text = written if isinstance(written, str) else json.dumps(written)
    body = f"step(1, 1)\nopen(metrics_path, 'w').write({text!r})\n"
    point = scripted_point(tmp_path, body, name="bad")
    db = tmp_path / "r.db"
    proc = benchc("run", str(point), "--db", str(db))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stdout + proc.stderr
    (run,) = Store(db).runs()
    assert run.status == "failed" and run.cause.startswith("invalid metrics"), run.cause
    assert run.metrics is None and run.ended_at is not None
    report = benchc("report", "-o", str(tmp_path / "out"), "--db", str(db))
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr


def test_a_report_over_a_store_holding_an_invalid_ok_row_shows_it_as_failed(tmp_path):
    """A store written by an older benchc, or edited by hand, may hold an `ok` row whose
    metrics lack what the report reads: it renders, and says why that row is not shown."""
    db = tmp_path / "r.db"
    good = tmp_path / "good.json"
    good.write_text(json.dumps(ok_metrics(12.0)))
    assert benchc("ingest", str(good), "--db", str(db)).returncode == 0
    with Store(db) as store:
        run_id = store.start(experiment="e", target="cpu", point="default", point_values={}, smoke=True,
                             spec_path=None, spec_sha256=None, build_path=None, log_path=None,
                             environment={}, plan=None, series="s", trial=1, source="ingest")  # fmt: skip
        store.finish(run_id, "ok", None, {"status": "ok"})
    out = tmp_path / "out"
    proc = benchc("report", "-o", str(out), "--db", str(db))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    page = (out / "report.md").read_text()
    assert "invalid metrics in the store" in page
