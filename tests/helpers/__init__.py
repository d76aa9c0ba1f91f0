"""Shared test helpers: repository paths, running the benchc CLI in this process or as a
subprocess, a free port, and which heavy libraries a command imports.

Test modules import these as `from helpers import ...` (tests/ is on sys.path: see
[tool.pytest.ini_options] pythonpath in pyproject.toml); fixtures live in tests/conftest.py."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
SPECS = REPO / "specs"
BAD = TESTS / "bad"
GOLDEN = TESTS / "golden"


@dataclass
class Result:
    code: int
    out: str
    err: str


@contextmanager
def own_store(args: tuple[str, ...], cwd: Path, env: dict) -> Iterator[dict]:
    """A command run in the repository (or a folder of it) without --db or BENCHC_RESULTS gets a store of its
    own, made empty for the call (and removed after it), not the developer's
    .benchc/results.db: a calibration or run stored there must not change what tests see
    (estimate and check show calibrations), and tests write nothing into the repository."""
    inside = REPO in (cwd.resolve(), *cwd.resolve().parents)
    if not inside or "--db" in args or env.get("BENCHC_RESULTS"):
        yield env
        return
    with tempfile.TemporaryDirectory(prefix="benchc-test-store-") as folder:
        yield {**env, "BENCHC_RESULTS": str(Path(folder) / "results.db")}


def run_cli(*args: str, cwd: Path | None = None) -> Result:
    """Run `benchc ARGS` in this process (fast); cwd is changed for the call if given."""
    from benchc.cli import main

    out, err = io.StringIO(), io.StringIO()
    previous = os.getcwd()
    saved = os.environ.get("BENCHC_RESULTS")
    try:
        if cwd is not None:
            os.chdir(cwd)
        with own_store(args, Path.cwd(), dict(os.environ)) as env:
            if env.get("BENCHC_RESULTS"):
                os.environ["BENCHC_RESULTS"] = env["BENCHC_RESULTS"]
            with redirect_stdout(out), redirect_stderr(err):
                try:
                    code = main(list(args))
                except SystemExit as exc:  # argparse errors
                    code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(previous)
        if saved is None:
            os.environ.pop("BENCHC_RESULTS", None)
        else:
            os.environ["BENCHC_RESULTS"] = saved
    return Result(code, out.getvalue(), err.getvalue())


def run_benchc(*args: str, cwd: Path | None = None, env: dict | None = None) -> Result:
    """Run `python -m benchc ARGS` as a real process (exit codes, tracebacks, imports)."""
    with own_store(args, cwd or REPO, {**os.environ, **(env or {})}) as environment:
        proc = subprocess.run(
            [sys.executable, "-m", "benchc", *args],
            cwd=cwd or REPO,
            capture_output=True,
            text=True,
            timeout=120,
            env=environment,
        )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def warm_python_env() -> dict:
    """What a test's own environment for a launch needs to run its programs with the tests'
    interpreter (tests/conftest.py's warm_python): PYTHON and the warm process's address."""
    names = ("PYTHON", "BENCHC_TEST_WARM_SOCKET", "BENCHC_TEST_WARM_REAL")
    return {name: os.environ[name] for name in names if name in os.environ}


def free_port() -> int:
    """A TCP port free on loopback now (for a rendezvous between launchers)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


HEAVY = ("torch", "diffusers", "transformers", "accelerate", "numpy", "matplotlib")


def heavy_modules_imported_by(*commands: list[str]) -> list[str]:
    """Run benchc commands in a fresh interpreter; the heavy libraries they imported."""
    code = (
        "import sys; from benchc.cli import main\n"
        f"rc = 0\nfor args in {list(commands)!r}:\n    rc |= main(args)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\nsys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return eval(proc.stdout.strip().splitlines()[-1])  # a list literal printed by the child


def point_in(folder: Path) -> Path:
    """The one build point compiled under a target's folder, whatever its name (a --set that
    changes a value names the point: `default` becomes `tensor-2`)."""
    (point,) = {p.parent for p in Path(folder).glob("*/bench.py")}
    return point
