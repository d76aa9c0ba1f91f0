"""Every ending recorded, whatever the moment: real signals to a real `benchc run` of the
S1 smoke (two torchrun nodes on this machine, each rank in a session of its own), at
random moments from before the launch to the measured steps. benchc must exit soon, leave
no process of the run behind (found by the marker every one of them inherits, wherever it
was re-parented) and record the run as interrupted or terminated, never running."""

from __future__ import annotations

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
