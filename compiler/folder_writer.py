"""The one writer of benchc's generated folders (compile's points, calibrate's layouts, the
folder of `report -o`): it writes the files it generates, by name, and nothing else.

What it keeps: every entry it does not generate (runs/, Slurm logs, caches, a user's notes or
folders), whatever an old manifest lists. What it removes: only a file a former build of the
folder generated and this one does not (a name of `stale_names`, e.g. job.sbatch once a point
no longer needs it), and only while its bytes are still what that build's manifest recorded:
a file the user changed is kept. What it refuses, with nothing written: a folder that is a
symbolic link, an entry it would write that is a folder or a link, and a folder in use (a
program running there holds a shared lock on its LOCK file; this writer takes it exclusively,
so a folder is never rewritten under a running program, nor by two writers at once). A
report's folder (FolderFiles.report) is the user's own: no program runs there, so it holds no
lock, and a link where a file goes is replaced by the file, never written through.

How it writes: every file of every folder first under a temporary name beside its place, then
each renamed into place: a failure before the renames leaves every folder as it was, and a
reader never sees a half-written file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from .diagnostics import BenchError, error
from .records import frozen

LOCK = ".benchc.lock"  # held shared by a program running in the folder, exclusively by the writer


@frozen
class FolderFiles:
    """One folder to write: its files (name -> text or bytes), which of them are executable,
    empty folders to make if missing (a Slurm log folder), and the manifest whose recorded
    hashes say which former files may go (None: nothing is ever removed). `report`: a folder
    the user named for a report (-o), where no program runs: taken as named (a link
    included), a link standing where a file goes is replaced by the file (never written
    through), and no lock file is left in it."""

    folder: Path
    files: dict[str, str | bytes]
    executable: frozenset[str] = frozenset()
    folders: tuple[str, ...] = ()
    manifest: str | None = None
    stale_names: tuple[str, ...] = ()
    report: bool = False


def write_folders(targets: list[FolderFiles], describe: Callable[[Path], str] = str) -> None:
    """Write every target whole, or none (see the module). `describe` names a folder in errors."""
    made: list[Path] = []
    with contextlib.ExitStack() as locks:
        temporaries: list[tuple[Path, Path]] = []
        try:
            for target in targets:
                _refuse_links(target, describe)
                made += _make_folder(target.folder)
                if not target.report:
                    locks.enter_context(_exclusive(target.folder, describe))
                for name, content in sorted(target.files.items()):
                    temporaries.append((_temporary(target, name, content), target.folder / name))
        except BaseException as exc:
            for temporary, _ in temporaries:
                temporary.unlink(missing_ok=True)
            locks.close()
            for folder in reversed(made):
                (folder / LOCK).unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    folder.rmdir()
            if isinstance(exc, OSError):
                where = exc.filename or (targets[0].folder if targets else "")
                raise error(f"cannot write {where}: {exc.strerror or exc}", None,
                            hint="nothing was changed") from None  # fmt: skip
            raise
        stale = [_stale(target) for target in targets]
        for temporary, final in temporaries:
            os.replace(temporary, final)
        for target, names in zip(targets, stale, strict=True):
            for name in names:
                (target.folder / name).unlink(missing_ok=True)
            for sub in target.folders:
                (target.folder / sub).mkdir(parents=True, exist_ok=True)


def _refuse_links(target: FolderFiles, describe: Callable[[Path], str]) -> None:
    folder = target.folder
    if folder.is_symlink() and not target.report:
        raise error(f"{describe(folder)} is a symbolic link: benchc writes only into a folder of its own",
                    None, hint="remove the link, or name the folder it points to with -o")  # fmt: skip
    if folder.exists() and not folder.is_dir():
        raise error(f"{describe(folder)} is a file, not a folder benchc writes", None,
                    hint="move it away, or name another folder with -o")  # fmt: skip
    for name in sorted(target.files):
        entry = folder / name
        if target.report and entry.is_symlink():
            continue  # replaced by the rename, never written through
        if entry.is_symlink() or (entry.exists() and not entry.is_file()):
            kind = "a symbolic link" if entry.is_symlink() else "a folder"
            raise error(f"{describe(entry)} is {kind}, where benchc writes its {name}", None,
                        hint="move it away and run the command again; nothing was changed")  # fmt: skip
    for sub in target.folders:
        entry = folder / sub
        if entry.is_symlink() or (entry.exists() and not entry.is_dir()):
            raise error(f"{describe(entry)} is not a folder, where benchc makes one", None,
                        hint="move it away and run the command again; nothing was changed")  # fmt: skip
    listed = _recorded(target)
    if listed is not None:
        foreign = sorted(n for n in target.files if n != target.manifest and n not in listed
                         and (folder / n).exists())  # fmt: skip
        if foreign:
            raise error(f"{describe(folder / foreign[0])} was not written by benchc, and the new build "
                        "writes a file of that name", None,
                        hint="move it away and run the command again; nothing was changed")  # fmt: skip


def _make_folder(folder: Path) -> list[Path]:
    """Make `folder` and any missing parent; the ones made, outermost first."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()][::-1]
    folder.mkdir(parents=True, exist_ok=True)
    return missing


@contextlib.contextmanager
def _exclusive(folder: Path, describe: Callable[[Path], str]) -> Iterator[None]:
    """The folder's lock, exclusively, without waiting: refused while a program runs there or
    another writer writes it."""
    # never through a link: the lock is the folder's own file
    descriptor = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    handle = os.fdopen(descriptor, "r+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _in_use(folder, describe) from None
        yield
    finally:
        handle.close()


def _in_use(folder: Path, describe: Callable[[Path], str]) -> BenchError:
    holders = lock_holders(folder / LOCK)
    who = ", ".join(f"pid {pid}" + (f" ({command})" if command else "") for pid, command in holders)
    return error(f"{describe(folder)} is in use: {who or 'another benchc command'} holds it",
                 None, hint="wait for the run to end (or stop it), then run the command again; "
                 "nothing was changed")  # fmt: skip


def lock_holders(lock: Path) -> list[tuple[int, str]]:
    """The processes of this host holding `lock` (Linux's /proc/locks), with their commands."""
    try:
        inode = lock.stat().st_ino
        table = Path("/proc/locks").read_text()
    except OSError:
        return []
    pids = set()
    for line in table.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            with contextlib.suppress(ValueError):
                pids.add(int(fields[4]))
    found = []
    for pid in sorted(pids):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            command = ""
        since = _started(pid)
        found.append((pid, command.strip()[:120] + (f", running since {since}" if since else "")))
    return found


def _started(pid: int) -> str | None:
    """When a process started, UTC (Linux: its start in clock ticks after boot, /proc/stat's btime)."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))  # fmt: skip
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    when = datetime.fromtimestamp(boot + ticks / os.sysconf("SC_CLK_TCK"), UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def _temporary(target: FolderFiles, name: str, content: str | bytes) -> Path:
    temporary = target.folder / f".{name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(temporary, flags, 0o644), "wb") as stream:
        stream.write(content.encode("utf-8") if isinstance(content, str) else content)
    temporary.chmod(0o755 if name in target.executable else 0o644)
    return temporary


def _recorded(target: FolderFiles) -> dict[str, str] | None:
    """name -> sha256 of the files the folder's manifest says a former build wrote; None
    where there is no readable manifest (then no file counts as the user's, and none goes)."""
    if target.manifest is None:
        return None
    try:
        record = json.loads((target.folder / target.manifest).read_text(encoding="utf-8"))
        return {e["path"]: e["sha256"] for e in record["files"] if isinstance(e, dict)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _stale(target: FolderFiles) -> list[str]:
    """Files a former build wrote that this one does not, still as that build wrote them."""
    gone = [n for n in target.stale_names if n not in target.files and (target.folder / n).is_file()]
    hashes = _recorded(target) if gone else None
    if not hashes:
        return []
    stale = []
    for name in gone:
        entry = target.folder / name
        if entry.is_symlink():
            continue
        with contextlib.suppress(OSError):
            if hashes.get(name) == hashlib.sha256(entry.read_bytes()).hexdigest():
                stale.append(name)
    return stale
