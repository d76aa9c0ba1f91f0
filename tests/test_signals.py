"""Every ending recorded, whatever the moment: real signals to a real `benchc run` of the
S1 smoke (two torchrun nodes on this machine, each rank in a session of its own), at
random moments from before the launch to the measured steps. benchc must exit soon, leave
no process of the run behind (found by the marker every one of them inherits, wherever it
was re-parented) and record the run as interrupted or terminated, never running."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchc.results.store import Store

from conftest import REPO, run_cli

TRIALS = int(os.environ.get("BENCHC_SIGNAL_TRIALS", "3"))  # per signal; BENCHC_SIGNAL_TRIALS=50 for long runs


def survivors(build: Path) -> list[int]:
    """Live processes whose environment names a run under `build` (BENCHC_RUN=...)."""
    needle = f"BENCHC_RUN={build}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z" and any(v.startswith(needle) for v in environ.split(b"\0")):
                found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def point(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("signals")
    result = run_cli("compile", "specs/sd3.bench", "--smoke", "--set", "train.batch=16",
                     "--set", "train.steps=40", "-o", str(out), cwd=REPO)  # fmt: skip
    assert result.code == 0, result.err
    return out / "sd3_mmdit_train/cpu/default-smoke"


@pytest.mark.parametrize("sig, status, code", [(signal.SIGINT, "interrupted", 130),
                                               (signal.SIGTERM, "terminated", 143)])  # fmt: skip
def test_a_signal_at_any_moment_ends_everything_and_is_recorded(point, tmp_path, sig, status, code):
    chance = random.Random(f"{sig}-{TRIALS}")
    for trial in range(TRIALS):
        db = tmp_path / f"r{trial}.db"
        runner = subprocess.Popen([sys.executable, "-m", "benchc", "run", str(point), "--db", str(db)],
                                  cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
        time.sleep(chance.uniform(0.3, 8.0))  # from interpreter start-up to the measured steps
        runner.send_signal(sig)
        sent = time.monotonic()
        returncode = runner.wait(timeout=60)
        assert time.monotonic() - sent < 30, "benchc took too long to stop"
        assert not survivors(point.resolve() / "runs"), f"trial {trial}: processes of the run survive"
        if not db.exists() or not Store(db).runs():
            assert returncode in (code, -sig), returncode  # before the store was written: no row
            continue
        (record,) = Store(db).runs()
        if record.status == "ok":  # the run finished just before the signal
            continue
        assert returncode == code, (trial, returncode, record.status, record.cause)
        assert record.status == status and record.ended_at is not None, record


@pytest.fixture(scope="module")
def one_process_point(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sigterm")
    result = run_cli("compile", "specs/sd3.bench", "--smoke", "--set", "cluster.nodes=1",
                     "--set", "cluster.devices_per_node=1", "--set", "parallel.data=1",
                     "--set", "train.batch=16", "-o", str(out), cwd=REPO)  # fmt: skip
    assert result.code == 0, result.err
    return out / "sd3_mmdit_train/cpu/default-smoke"


@pytest.mark.parametrize("job_end, status", [(None, "cancelled"), ("past", "timeout")])
def test_the_generated_program_records_sigterm_with_the_step_it_reached(one_process_point, tmp_path,
                                                                        job_end, status):  # fmt: skip
    """Slurm's cancel and time limit both send SIGTERM to the ranks: the program itself writes
    metrics saying which (job.sbatch exports the job's end time) and how far it got."""
    plan = json.loads((one_process_point / "manifest.json").read_text())["plan"]
    assert plan["workload"]["steps"] == 5
    bench = one_process_point / "bench.py"
    slow = tmp_path / "bench.py"  # the same program with more steps, so the signal lands mid-run
    slow.write_text(bench.read_text().replace('"steps": 5,', '"steps": 400,', 1))
    assert slow.read_text() != bench.read_text()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if job_end == "past":
        env["BENCHC_JOB_END_TIME"] = str(int(time.time()) - 5)
    metrics = tmp_path / "metrics.json"
    command = [sys.executable, str(slow), "--metrics", str(metrics)]
    program = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env)  # fmt: skip
    for line in program.stdout:
        if line.startswith("step 4/"):
            break
    program.send_signal(signal.SIGTERM)
    program.stdout.read()
    assert program.wait(timeout=60) == 128 + signal.SIGTERM
    written = json.loads(metrics.read_text())
    assert written["status"] == status, written.get("error")
    assert written["error"]["type"] == "Stopped" and "SIGTERM" in written["error"]["message"]
    assert written["progress"]["of"] == 400 and 4 <= written["progress"]["step"] < 400
    assert written["ended_at"]
