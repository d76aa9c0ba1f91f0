"""Every process a run starts, found and ended as one: its launchers' process groups and any
process that carries the run's marker in its environment (torchrun starts each rank in a
session of its own, and a rank whose launcher died is re-parented to PID 1; the environment
they inherit still names the run). Linux /proc; TERM (or INT) first, KILL after a grace."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

MARKER = "BENCHC_RUN"  # the environment variable every process of a run inherits
STOP_GRACE_S = 10.0  # after SIGINT/SIGTERM, before SIGKILL


def _alive(pid: int) -> bool:
    """Running or sleeping, not a zombie (PID 1 here reaps late)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def marked(value: str) -> list[int]:
    """The live processes whose environment holds MARKER=value (never this process)."""
    needle = f"{MARKER}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _group_members(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal(processes: list[subprocess.Popen], value: str, sig: int) -> None:
    for process in processes:
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in marked(value):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def anything_left(processes: list[subprocess.Popen], value: str) -> bool:
    for process in processes:
        process.poll()  # reap the launcher itself if it ended
    return bool(marked(value)) or any(
        process.returncode is None or (_group_members(process.pid) and _alive_in_group(process.pid))
        for process in processes
    )


def _alive_in_group(pgid: int) -> bool:
    """A group member that is not a zombie waiting for PID 1."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


@contextmanager
def signals_held():
    """Ctrl-C, SIGTERM and SIGHUP are ignored inside: what it guards (stopping a run,
    recording how it ended) is not cut short."""
    held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, previous in held.items():
            signal.signal(sig, previous)


def stop(processes: list[subprocess.Popen], value: str, first: int = signal.SIGTERM,
         grace_s: float = STOP_GRACE_S) -> None:  # fmt: skip
    """End every process of the run: `first`, then SIGKILL after `grace_s`, until none is left."""
    with signals_held():
        for sig, grace in ((first, grace_s), (signal.SIGKILL, 5.0)):
            if not anything_left(processes, value):
                break
            _signal(processes, value, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and anything_left(processes, value):
                time.sleep(0.05)
        for process in processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
