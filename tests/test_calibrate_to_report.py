"""From a calibration to the report, as a user does it on a CPU-only machine: S1's smoke run
with --profile, the report (no cpu MFU: the datasheet states no peak), `benchc calibrate`, and
then targets, estimate and the report show the measured ceilings: an MFU against the measured
matmul peak, a measured roofline, and where the profiled step's time goes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.integration


def benchc(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "benchc", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def page(db: Path, out: Path) -> str:
    benchc("report", "--db", str(db), "-o", str(out))
    return (out / "report.md").read_text()


def test_a_cpu_calibration_and_a_profiled_run_reach_targets_estimate_and_the_report(tmp_path):
    db = tmp_path / "results.db"
    benchc("run", "specs/sd3.bench", "--target", "cpu", "--smoke", "--profile", "-o", str(tmp_path / "b"),
           "--db", str(db))  # fmt: skip
    before = page(db, tmp_path / "before")
    assert "benchc calibrate --target cpu would add measured ceilings" in before
    assert "MFU (measured)" not in before and "of the measured" not in before
    # where the step goes is there with or without a calibration: one profiled target alone
    assert before.count("cpu at batch-16 spends ") == 1 and "of its step outside matrix multiplies" in before
    assert "Shares of the profiled step time:" in before

    benchc("calibrate", "--target", "cpu", "--smoke", "-o", str(tmp_path / "cal"), "--db", str(db))
    targets = benchc("targets", "--db", str(db)).stdout
    assert "Measured by benchc calibrate" in targets
    estimate = benchc("estimate", "specs/sd3.bench", "--smoke", "-t", "cpu", "--db", str(db)).stdout
    assert "measured" in estimate and "at the measured ceilings at most" in estimate

    after = page(db, tmp_path / "after")
    assert "MFU (measured)" in after and "would add measured ceilings" not in after
    lines = [line for line in after.splitlines() if "of the measured" in line and "TFLOP/s" in line]
    assert len(lines) == 2, lines  # both sweep points, each against the measured matmul peak
    assert all("MFU: the datasheet states no peak" in line for line in lines)
    charts = {p.name for p in (tmp_path / "after").glob("*.png")}
    assert any("profile" in name for name in charts) and any("roofline" in name for name in charts), charts
