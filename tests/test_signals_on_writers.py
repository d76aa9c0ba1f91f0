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


COMMAND_CUT_SHORT = """
import os, signal, sys, time, weakref
from compiler import cli

folder, moment = sys.argv[3:5]

def report(args):
    sys.path.insert(0, folder)
    if moment == "import":  # the signal comes while a module is being run
        import slow_module
    elif moment == "callback":  # ... while a callback whose exceptions Python only prints runs
        class Thing:
            pass
        thing = Thing()
        kept = weakref.ref(thing, lambda _: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(1)))
        del thing
    else:  # ... while a library whose C initialisation renames the exception raised inside it runs
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except BaseException:
            raise ImportError("initialization failed") from None
    time.sleep(5)
    print("not stopped", file=sys.stderr)
    return 0

cli._command = lambda name: report
sys.argv = ["benchc", "report", "--db", sys.argv[1], "-o", sys.argv[2]]
cli.entry()
"""
SLOW_MODULE = """
import os, signal, time
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.3)
open(os.path.join(os.path.dirname(__file__), "imported"), "w").close()
"""


@pytest.mark.parametrize("moment", ["import", "callback", "renamed"])
def test_a_signal_where_python_cannot_raise_it_still_stops_the_command(tmp_path, moment):
    """Seen under load: a SIGTERM inside matplotlib's import left its C backend half made
    ("ImportError: initialization failed", then "matplotlib is not installed" and an abort at
    exit), and one inside importlib's weak-reference callback was printed ("Exception ignored
    in") and lost. A signal inside an import stops the command once the import is done; one in
    a callback is raised again from the command's code; one renamed by C code is still the
    stop. Each ends as the stop: 143, no traceback."""
    (tmp_path / "slow_module.py").write_text(SLOW_MODULE)
    process = subprocess.run([sys.executable, "-c", COMMAND_CUT_SHORT, str(tmp_path / "r.db"),
                              str(tmp_path / "out"), str(tmp_path), moment], cwd=REPO,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "Traceback" not in process.stderr and "Exception ignored" not in process.stderr, process.stderr
    assert process.returncode == 128 + signal.SIGTERM, process.stderr
    assert "SIGTERM" in process.stderr and "not stopped" not in process.stderr
    assert (tmp_path / "imported").exists() == (moment == "import")  # the module was run whole
