"""benchc's cache folder: what a new process would otherwise rebuild each time it starts (the
Lark parser tables of the grammar, the Jinja templates compiled to Python bytecode).

Location: $BENCHC_CACHE_DIR, else $XDG_CACHE_HOME/benchc, else ~/.cache/benchc.
BENCHC_CACHE_DIR=off (or 0, no, none, false) disables the cache: nothing is read or written.

The cache only ever saves time. Every entry is keyed by a hash of what it was built from
(plus the library and Python versions), written to a temporary file and moved into place
with os.replace (a reader sees a whole file or none), and read defensively: an entry that is
missing, unreadable or damaged is rebuilt, and a folder that cannot be written is left alone;
neither is ever an error.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

ENVIRONMENT_VARIABLE = "BENCHC_CACHE_DIR"
DISABLED = ("off", "0", "no", "none", "false", "disabled")


def cache_dir() -> Path | None:
    """The cache folder (not created here), or None when the cache is disabled."""
    chosen = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if chosen.lower() in DISABLED:
        return None
    if chosen:
        return Path(chosen).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative value is to be ignored
        return Path(xdg) / "benchc"
    try:
        return Path.home() / ".cache" / "benchc"
    except RuntimeError:  # no home directory to be found: no cache
        return None


def ensure_dir() -> Path | None:
    """The cache folder, created (private to the user) if need be; None if disabled or not creatable."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    return folder


def key(*parts: str | bytes) -> str:
    """A short hash of what an entry is built from, with the running Python's version."""
    digest = hashlib.sha256(f"python {sys.version_info[0]}.{sys.version_info[1]}".encode())
    for part in parts:
        digest.update(b"\0")
        digest.update(part.encode("utf-8") if isinstance(part, str) else part)
    return digest.hexdigest()[:24]


def read_bytes(name: str) -> bytes | None:
    """The content of the cache entry `name`, or None (disabled, absent or unreadable)."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        return (folder / name).read_bytes()
    except OSError:
        return None


def write_bytes(name: str, data: bytes) -> bool:
    """Store the cache entry `name` atomically (temporary file, then os.replace). False where
    the cache is disabled or cannot be written; never raises for that."""
    folder = ensure_dir()
    if folder is None:
        return False
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, folder / name)
        return True
    except OSError:
        if temporary is not None:
            try:
                os.unlink(temporary)
            except OSError:
                pass
        return False
