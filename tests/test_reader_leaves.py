"""A reader that leaves early (`benchc run ... | head -4`) stops no work: every point still
runs and is recorded, the output it would have read is dropped, and the exit status says
how the runs went."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchc.results.store import Store

from helpers import REPO

pytestmark = pytest.mark.integration


def test_run_piped_into_head_runs_and_records_every_point(tmp_path):
    db = tmp_path / "results.db"
    # both points of the S1 smoke, one process each: progress comes from a thread reading the
    # launcher (one per node; tests/test_signals.py ends two-node runs at any moment)
    one = ["--set", "cluster.nodes=1", "--set", "cluster.devices_per_node=1", "--set", "parallel.data=1"]
    command = [sys.executable, "-m", "benchc", "run", "specs/sd3.bench", "--target", "cpu", "--smoke", *one,
               "-o", str(tmp_path / "build"), "--db", str(db)]  # fmt: skip
    runner = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    first = [runner.stdout.readline() for _ in range(4)]  # what `head -4` reads, then it leaves
    runner.stdout.close()
    _, err = runner.communicate(timeout=600)
    assert all(first), first
    assert runner.returncode == 0, err.decode()[-3000:]
    records = Store(db).runs()
    named = "_nodes-1_devices_per_node-1_data-1"  # the --set values name the points
    assert sorted(r.point for r in records) == [f"batch-16{named}", f"batch-32{named}"]  # the second too
    assert {r.status for r in records} == {"ok"}
