"""Run one build point: launch it in its own process group, stream its log, enforce the timeout,
forward Ctrl-C, and say how it ended (ok, failed with a cause, timeout, interrupted)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..diagnostics import error

LOG_TAIL_LINES = 40
STOP_GRACE_S = 10.0  # after SIGINT/SIGTERM, before SIGKILL


@dataclass(frozen=True)
class BuildPoint:
    path: Path
    manifest: dict

    @property
    def plan(self) -> dict:
        return self.manifest.get("plan") or {}

    @property
    def label(self) -> str:
        m = self.manifest
        return f"{m['experiment']} / {m['target']} / {self.path.name}"


@dataclass(frozen=True)
class Outcome:
    status: str  # ok | failed | timeout | interrupted
    cause: str | None
    metrics: dict | None
    returncode: int | None
    log_tail: str
    elapsed_s: float


def find_points(path: Path) -> list[BuildPoint]:
    """The build point at `path`, or every build point below it (a folder with manifest.json)."""
    if not path.exists():
        raise error(f"no such build folder: '{path}'", None)
    manifests = [path / "manifest.json"] if (path / "manifest.json").exists() else sorted(
        p for p in path.rglob("manifest.json") if "runs" not in p.relative_to(path).parts[:-1]
    )  # fmt: skip
    points = []
    for manifest_path in manifests:
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise error(f"cannot read {manifest_path}: {exc}", None) from None
        if manifest.get("manifest_version") != 1 or "experiment" not in manifest:
            raise error(f"{manifest_path} is not a benchc build manifest (version 1)", None)
        points.append(BuildPoint(manifest_path.parent, manifest))
    if not points:
        raise error(f"no build points (folders with manifest.json) under '{path}'", None,
                    hint="compile one first: benchc compile SPEC -o DIR")  # fmt: skip
    return points


class _Interrupted(Exception):
    pass


def execute(point: BuildPoint, run_dir: Path, timeout_s: float, on_line: Callable[[str], None]) -> Outcome:
    """Launch `point`'s launch.sh; every output line goes to run_dir/log.txt and to on_line."""
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = run_dir / "metrics.json"
    log_path = run_dir / "log.txt"
    # The interpreter running benchc runs the program unless PYTHON says otherwise.
    env = {"PYTHON": sys.executable, **os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            ["bash", str((point.path / "launch.sh").resolve()), "--metrics", str(metrics_path.resolve())],
            cwd=point.path.resolve(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            errors="replace", bufsize=1, env=env, start_new_session=True,
        )  # fmt: skip

        def pump() -> None:
            for line in process.stdout:
                log.write(line)
                log.flush()
                tail.append(line.rstrip("\n"))
                on_line(line.rstrip("\n"))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        ending = None
        try:
            while process.poll() is None:
                if time.monotonic() - started > timeout_s:
                    ending = "timeout"
                    _stop_group(process, signal.SIGTERM)
                    break
                time.sleep(0.1)
        except KeyboardInterrupt:
            ending = "interrupted"
            _stop_group(process, signal.SIGINT)
        if ending is None and _group_alive(process):  # the launcher left processes behind
            _stop_group(process, signal.SIGTERM)
        reader.join()  # the pipe closes once every process holding it has ended
    elapsed = time.monotonic() - started
    log_tail = "\n".join(tail)
    metrics = _read_json(metrics_path)
    returncode = process.returncode
    if ending == "timeout":
        return Outcome("timeout", f"timeout: still running after {timeout_s:g} s; stopped", metrics,
                       returncode, log_tail, elapsed)  # fmt: skip
    if ending == "interrupted":
        return Outcome("interrupted", "interrupted by the user (Ctrl-C)", metrics, returncode,
                       log_tail, elapsed)  # fmt: skip
    if returncode == 0 and metrics and metrics.get("status") == "ok":
        return Outcome("ok", None, metrics, returncode, log_tail, elapsed)
    return Outcome("failed", failure_cause(metrics, run_dir, returncode, log_tail), metrics,
                   returncode, log_tail, elapsed)  # fmt: skip


def _stop_group(process: subprocess.Popen, first: int) -> None:
    """Signal the whole process group (launcher, torchrun, every rank), wait for all of it
    to end, then SIGKILL what is left. A second Ctrl-C meanwhile does not cut this short."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for sig, grace in ((first, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and _group_alive(process):
                time.sleep(0.1)
            if not _group_alive(process):
                break
    finally:
        signal.signal(signal.SIGINT, previous)
    process.wait()


def _group_alive(process: subprocess.Popen) -> bool:
    process.poll()  # reap the launcher itself if it ended
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    return True


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def failure_cause(metrics: dict | None, run_dir: Path, returncode: int | None, log_tail: str) -> str:
    """One line that says why a run failed, from the most specific evidence there is."""
    errors = []
    if metrics and metrics.get("error"):
        errors.append(metrics["error"])
    for rank_file in sorted(run_dir.glob("metrics.rank*.json")):
        data = _read_json(rank_file)
        if data and data.get("error"):
            errors.append(data["error"])
    real = [e for e in errors if e.get("type") not in ("SystemExit", "KeyboardInterrupt")]
    for err in real or errors:
        kind, message, rank = err.get("type", "error"), err.get("message", ""), err.get("rank", "?")
        text = f"{kind}: {message}".lower()
        if "out of memory" in text or kind == "OutOfMemoryError":
            return f"out of memory on rank {rank}: {message}"
        if kind == "FloatingPointError":
            return f"non-finite loss on rank {rank}: {message}"
        return f"rank {rank} raised {kind}: {message}"
    if "out of memory" in log_tail.lower():
        return f"out of memory (exit code {returncode}); see the log"
    if returncode in (-9, 137):
        return "killed by SIGKILL (out of host memory?) before writing metrics"
    raised = [line.strip() for line in log_tail.splitlines() if _EXCEPTION_LINE.match(line.strip())]
    if raised:  # the last line of a Python traceback names the exception
        return f"crashed with {raised[-1]} (exit code {returncode}, no metrics written)"
    return f"exited with code {returncode} without writing metrics; see the log"


_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt)):\s")
