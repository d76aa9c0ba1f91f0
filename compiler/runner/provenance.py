"""Where a number came from: the state of the repository that holds the spec, recorded with
each run. One job: `spec_repository(path)` asks git for the revision checked out (HEAD), whether
tracked files have uncommitted changes, and whether the spec itself is tracked (a revision does
not describe an untracked spec); None where there is no git, the spec is in no repository, or
git does not answer in time. A run is never failed for it."""

from __future__ import annotations

import subprocess
from pathlib import Path

GIT_TIMEOUT_S = 10.0


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None


def spec_repository(spec_path: str | None) -> dict | None:
    """{"revision": HEAD's hash, "dirty": tracked files changed, "spec_tracked": bool}, or None."""
    if not spec_path:
        return None
    spec = Path(spec_path)
    if not spec.parent.is_dir():
        return None
    head = _git(spec.parent, "rev-parse", "--verify", "--quiet", "HEAD")
    if head is None or head.returncode != 0 or not head.stdout.strip():
        return None
    status = _git(spec.parent, "status", "--porcelain", "--untracked-files=no")
    tracked = _git(spec.parent, "ls-files", "--error-unmatch", "--", spec.name)
    if status is None or status.returncode != 0 or tracked is None:
        return None
    return {"revision": head.stdout.strip(), "dirty": bool(status.stdout.strip()),
            "spec_tracked": tracked.returncode == 0}  # fmt: skip
