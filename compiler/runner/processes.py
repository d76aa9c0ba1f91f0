"""Every process a run starts, found and ended as one: its launchers' process groups, any
process that carries the run's marker in its environment (torchrun starts each rank in a
session of its own, and a rank whose launcher died is re-parented to PID 1; the environment
they inherit still names the run), and the process group of each of those (launch.sh runs
the program in a group of its own; a compile worker or compiler in it is reached even where
it was started with an environment of its own). Linux /proc; TERM (or INT) first, KILL after
a grace. The launchers and programs act on the first signal themselves: launch.sh passes it
to the program's group, and the program records the run's ending at once (a second signal
changes nothing there)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from ..pids import alive

MARKER = "BENCHC_RUN"  # the environment variable every process of a run inherits
STOP_GRACE_S = 10.0  # after SIGINT/SIGTERM, before SIGKILL


def ended_with_benchc():
    """A launcher's preexec_fn on Linux: PR_SET_PDEATHSIG, so that the launcher gets SIGTERM
    the moment benchc ends without stopping it (SIGKILL, an out-of-memory kill: no chance to
    stop anything) and stops its program as for any SIGTERM (launch.sh passes it to the
    program's group; the program records how it ended). None elsewhere. The function called
    in the child is resolved here, before the fork: the child only calls into libc."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent, pr_set_pdeathsig, term = os.getpid(), 1, int(signal.SIGTERM)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, term, 0, 0, 0)
        if os.getppid() != parent:  # benchc ended before the line above
            os.kill(os.getpid(), term)

    return preexec


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
        if needle in environ.split(b"\0") and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _live_groups() -> set[int]:
    """The process groups with a member that is not a zombie waiting for PID 1."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 2 and fields[0] != "Z":
                found.add(int(fields[2]))
    return found


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _signal(groups: set[int], pids: list[int], sig: int) -> None:
    own = os.getpgrp()
    for pgid in groups:
        if pgid > 1 and pgid != own:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _run_groups(processes: list[subprocess.Popen], pids: list[int]) -> set[int]:
    """The launchers' groups (each launcher leads its own) and the marked processes' groups."""
    own = os.getpgrp()
    groups = {process.pid for process in processes}
    groups.update(g for g in map(_group_of, pids) if g is not None and g > 1 and g != own)
    return groups


def anything_left(processes: list[subprocess.Popen], value: str, groups: set[int] | None = None) -> bool:
    """A launcher not yet ended, a marked process, or a live member of one of `groups` (the
    launchers' groups where none are given)."""
    for process in processes:
        process.poll()  # reap the launcher itself if it ended
    if any(process.returncode is None for process in processes) or marked(value):
        return True
    watched = groups if groups is not None else {process.pid for process in processes}
    return bool(watched & _live_groups())


@contextmanager
def signals_held():
    """Ctrl-C, SIGTERM, SIGHUP and SIGQUIT are ignored inside: what it guards (stopping a run,
    recording how it ended) is not cut short."""
    endings = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in endings}
    try:
        yield
    finally:
        for sig, previous in held.items():
            signal.signal(sig, previous)


def stop(processes: list[subprocess.Popen], value: str, first: int = signal.SIGTERM,
         grace_s: float = STOP_GRACE_S) -> None:  # fmt: skip
    """End every process of the run: `first`, then SIGKILL after `grace_s`, until none is left.
    Each round reaches the launchers' groups, every marked process and the groups of all
    the marked processes seen so far (a group outlives its leader)."""
    groups: set[int] = set()
    with signals_held():
        for sig, grace in ((first, grace_s), (signal.SIGKILL, 5.0)):
            pids = marked(value)
            groups |= _run_groups(processes, pids)
            if not anything_left(processes, value, groups):
                break
            _signal(groups, pids, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and anything_left(processes, value, groups):
                time.sleep(0.05)
        for process in processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
