"""SIGTERM, SIGHUP and SIGQUIT to a command that writes files (issue 34, minor: report left
`.part` files): whatever the moment the signal comes, nothing half-written is left (no
temporary file beside the report or in a build point), the files are the old ones or the
new ones, and the command exits 128 + the signal (or 0, done before it came; or it is killed
by the signal itself, -N, where it came before benchc's handler was installed at start-up,
when nothing is written yet)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from report_store import store_run

from helpers import REPO

pytestmark = pytest.mark.integration

MOMENTS = (0.3, 0.8, 1.4, 2.2)  # seconds after the start: imports, reading, drawing, writing


def interrupted(command: list[str], sig: signal.Signals, after: float) -> int:
    process = subprocess.Popen([sys.executable, "-m", "benchc", *command], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    time.sleep(after)
    process.send_signal(sig)
    _, err = process.communicate(timeout=60)
    assert "Traceback" not in err, err
    return process.returncode


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_a_signal_to_report_leaves_no_part_file(tmp_path, sig):
    db = tmp_path / "r.db"
    for throughput in (10.0, 20.0):
        store_run(db, "cpu", throughput)
    out = tmp_path / "reports"
    for after in MOMENTS:
        code = interrupted(["report", "--db", str(db), "-o", str(out)], sig, after)
        assert code in (0, 128 + sig, -sig), code
        left = (
            [p.name for p in out.iterdir() if p.name.startswith(".") or p.name.endswith(".part")]
            if out.exists()
            else []
        )
        assert left == [], (after, left)


def test_a_signal_to_compile_leaves_no_temporary_file(tmp_path):
    out = tmp_path / "build"
    for after in MOMENTS:
        code = interrupted(["compile", "specs/sd3.bench", "-o", str(out)], signal.SIGTERM, after)
        assert code in (0, 143, -signal.SIGTERM), code
        left = [p for p in out.rglob("*.tmp")] if out.exists() else []
        assert left == [], (after, left)
