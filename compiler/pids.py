"""Whether a process id names a live process: the one rule benchc and its tests use.

A zombie is dead: it has ended and holds nothing (no lock, no device, no run), it only waits
for its parent to collect its exit status, and PID 1 in a container may collect it late. Yet
`kill(pid, 0)` still answers for a zombie, so where Linux's /proc shows the process its state
decides. Where /proc does not show it (macOS has no /proc; a /proc mounted with hidepid hides
other users' processes) the kernel is asked with signal 0: no such process is dead, and one
this user may not signal (PermissionError) exists, so it is alive.
"""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not ended: running, sleeping or stopped, not a
    zombie. Ids below 1 name no process (0 and negative ids are process groups to kill())."""
    if pid < 1:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        pass  # no /proc here, an entry this user may not see, or no such process: ask the kernel
    else:
        # "pid (command) state ...": the command may hold spaces and ")", so split after the last.
        try:
            return stat.rsplit(")", 1)[1].split()[0] != "Z"
        except IndexError:  # not the layout Linux writes
            return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: an id no process can have
        return False
    except PermissionError:  # another user's process
        return True
    return True
