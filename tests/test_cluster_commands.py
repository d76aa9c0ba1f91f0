"""submit, status, cancel and ingest where no cluster is needed: their user errors, and how
ingest groups a job's trials, keeps the time a run ran and refuses a file stored before.
(test_slurm.py runs them through a real Slurm.)"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_points import ok_metrics, scripted_point

from benchc.results.store import Store

from helpers import REPO

pytestmark = pytest.mark.integration


def benchc(*args: str, db: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchc", *args, "--db", str(db)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip


def test_submit_without_slurm_says_so_and_compiles_nothing(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    out = tmp_path / "build"
    proc = benchc("submit", "specs/sd3.bench", "--smoke", "-o", str(out), db=tmp_path / "r.db",
                  env={"PATH": str(empty)})  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "'sbatch' is not on PATH" in proc.stderr and "docs/clusters.md" in proc.stderr
    assert not out.exists() and not (tmp_path / "r.db").exists()


def test_submit_flags_are_checked_before_anything_is_submitted(tmp_path):
    proc = benchc("submit", "specs/sd3.bench", "--smoke", "--partition", "gpu;rm -rf /",
                  "--time", "soon", db=tmp_path / "r.db")  # fmt: skip
    assert proc.returncode == 2
    assert "--partition:1:1: error: 'gpu;rm -rf /' is not a valid --partition" in proc.stderr
    assert "'soon' is not a valid --time" in proc.stderr
    proc = benchc("submit", "specs/sd3.bench", "--repeat", "0", db=tmp_path / "r.db")
    assert proc.returncode == 2 and "--repeat: expected a number from 1 to 100, got 0" in proc.stderr


def test_a_build_without_a_job_file_is_refused(tmp_path):
    point = scripted_point(tmp_path, "pass\n")  # compiled without --sbatch: a cpu point, one node
    assert not (point / "job.sbatch").exists()
    proc = benchc("submit", str(point), db=tmp_path / "r.db")
    assert proc.returncode == 2 and "has no job.sbatch" in proc.stderr and "--sbatch" in proc.stderr


def test_status_and_cancel_with_nothing_submitted(tmp_path):
    db = tmp_path / "r.db"
    assert "no submitted runs" in benchc("status", db=db).stdout
    proc = benchc("cancel", db=db)
    assert proc.returncode == 2 and "name the runs to cancel, or --all" in proc.stderr
    assert benchc("cancel", "--all", db=db).stdout.startswith("no submitted run is pending or running")
    proc = benchc("cancel", "abc123", db=db)
    assert proc.returncode == 2 and "no submitted run 'abc123'" in proc.stderr


def job_trial(folder: Path, trial: int, throughput: float, job: str = "4711") -> Path:
    metrics = copy.deepcopy(ok_metrics(throughput))
    metrics["job"] = {"scheduler": "slurm", "id": job, "cluster": "c1", "trial": trial, "trials": 3}
    metrics["started_at"] = f"2026-11-0{trial}T10:00:00+00:00"
    metrics["ended_at"] = f"2026-11-0{trial}T10:05:00+00:00"
    metrics["hosts"], metrics["nodes"] = ["n1", "n2"], 2
    path = folder / f"metrics-{trial}.json"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics, indent=1))
    return path


def test_ingest_groups_the_trials_of_a_job_and_keeps_when_they_ran(tmp_path):
    db = tmp_path / "r.db"
    first = [job_trial(tmp_path / "job", t, 100.0 + t) for t in (1, 2)]
    assert benchc("ingest", *map(str, first), db=db).returncode == 0
    late = job_trial(tmp_path / "job", 3, 103.0)  # the third trial, ingested later
    out = benchc("ingest", str(late), db=db).stdout
    assert "job 4711 trial 3/3" in out
    with Store(db) as store:
        records = store.runs()
    assert len({r.series for r in records}) == 1 and [r.trial for r in records] == [1, 2, 3]
    assert [r.started_at[:10] for r in records] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert all(r.job_id == "4711" and r.cluster == "c1" and r.status == "ok" for r in records)
    report = tmp_path / "reports"
    assert benchc("report", "-o", str(report), db=db).returncode == 0
    page = (report / "report.md").read_text()
    assert "| 102 [" in page  # one row: the median of 3 trials with its interval (3 figures)
    assert "2 on 2 hosts" in page


def test_ingest_refuses_a_file_already_stored_unless_forced(tmp_path):
    db = tmp_path / "r.db"
    path = job_trial(tmp_path / "job", 1, 100.0)
    assert benchc("ingest", str(path), db=db).returncode == 0
    copy_elsewhere = tmp_path / "copy.json"
    copy_elsewhere.write_text(json.dumps(json.loads(path.read_text())))  # same content, new layout
    proc = benchc("ingest", str(copy_elsewhere), db=db)
    assert proc.returncode == 2 and "is already in the results store as run" in proc.stderr
    assert "--force" in proc.stderr
    proc = benchc("ingest", str(path), str(path), "--force", db=db)
    assert proc.returncode == 0
    with Store(db) as store:
        assert len(store.runs()) == 3


def test_ingest_is_all_or_nothing(tmp_path):
    db = tmp_path / "r.db"
    good = job_trial(tmp_path / "job", 1, 100.0)
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "benchc-metrics"}')
    proc = benchc("ingest", str(good), str(bad), db=db)
    assert proc.returncode == 2 and "does not match the benchc metrics schema" in proc.stderr
    proc = benchc("ingest", str(good), str(good), db=db)
    assert proc.returncode == 2 and "is the same metrics as" in proc.stderr
    with Store(db) as store:
        assert store.runs() == []
