"""Debian tools the tests need (shellcheck, Slurm, munge), installed on first use.

CI starts on a clean machine as root: a missing tool is installed with apt-get, once per
test session. Where that cannot be done the caller is told why; tests that need the tool
then fail (they must run on this project's machines and in CI), never pass silently.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

LOCK = Path("/tmp/benchc-tests-apt.lock")


class Unavailable(RuntimeError):
    """This machine cannot run the tool at all (not root, no apt-get, no namespaces)."""


def ensure(binaries: dict[str, str]) -> None:
    """binaries: command name -> the Debian package that provides it."""
    missing = sorted({package for name, package in binaries.items() if shutil.which(name) is None})
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise Unavailable(f"needs the Debian packages {', '.join(missing)} (apt-get as root)")
    with LOCK.open("w") as lock:  # one installer at a time (pytest workers, other sessions)
        fcntl.flock(lock, fcntl.LOCK_EX)
        still = sorted({p for name, p in binaries.items() if shutil.which(name) is None})
        if not still:
            return
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *still]
        proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
        if proc.returncode != 0:  # a fresh machine has no package lists yet
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=600)
            proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
        if proc.returncode != 0:  # a machine that should have it and cannot: a failure, not a skip
            raise RuntimeError(f"apt-get install {' '.join(still)} failed: {proc.stderr[-500:]}")
