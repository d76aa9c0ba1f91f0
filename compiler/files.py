"""The files and folders a user names, taken only as what they claim to be: read a file (a
spec, a metrics file or manifest, a prices file) within a size limit, refusing what is not a
regular file, with located errors in the caller's words; and refuse a build point's runs/
that is a link, before a run writes through it.

One job: the bytes, or a BenchError. Decoding and parsing are the caller's. A directory, a
FIFO, a socket or a device is refused before it is opened (a FIFO could block forever, a
device never end), and at most `limit` + 1 bytes are ever read, whatever the file's size said
when it was looked at (it may grow in between).
"""

from __future__ import annotations

import stat
from pathlib import Path

from .diagnostics import Source, Span, error


def read_bounded(
    path: Path,
    name: str,
    what: str,
    limit: int,
    where: Span | None = None,
    *,
    prefix: str = "",
    special_hint: str | None = None,
    large_hint: str | None = None,
    show_first_line: bool = False,
) -> bytes:
    """At most `limit` bytes of `path`. `name` is the path as the user wrote it, `what` the
    kind of file ("a .bench file" reads "'x' is a directory, not a .bench file"), `where` the
    location of the reference to it (an include line), `prefix` starts every message (a flag
    name). `show_first_line`: a file over the limit is located at its first line, shown."""
    size_text = f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit // 1024} KiB"
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{prefix}'{name}' is a directory, not {what}", where)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{prefix}'{name}' is not a regular file (a FIFO, socket or device)", where,
                        hint=special_hint or f"{what} is read from a file on disk")  # fmt: skip
        if info.st_size > limit:
            at = where
            if show_first_line and where is None:
                with path.open("rb") as head:  # show its first line, read nothing more
                    first = head.read(512).split(b"\n")[0].decode("utf-8", errors="replace")
                at = Span.start_of(Source(name, first))
            raise error(f"{prefix}'{name}' is {info.st_size / 2**20:.1f} MiB; {what} is at most {size_text}",
                        at, hint=large_hint)  # fmt: skip
        with path.open("rb") as stream:
            raw = stream.read(limit + 1)
    except FileNotFoundError:
        raise error(f"{prefix}no such file: '{name}'", where) from None
    except PermissionError:
        raise error(f"{prefix}cannot read '{name}': permission denied", where) from None
    except IsADirectoryError:
        raise error(f"{prefix}'{name}' is a directory, not {what}", where) from None
    except OSError as exc:
        raise error(f"{prefix}cannot read '{name}': {exc.strerror or exc}", where) from None
    if len(raw) > limit:  # it grew while we looked
        raise error(f"{prefix}'{name}' is larger than {size_text}", where)
    return raw


def refuse_linked_runs(point: Path) -> None:
    """A build point's runs/ that is a symbolic link (or not a folder) is refused: a run's log
    and metrics are written inside the build point the user named, never through a link."""
    runs = point / "runs"
    if runs.is_symlink() or (runs.exists() and not runs.is_dir()):
        what = "a symbolic link" if runs.is_symlink() else "not a folder"
        raise error(f"{runs} is {what}: benchc writes a run's files only inside its build point", None,
                    hint="remove it (or move it away) and run again; nothing was run")  # fmt: skip
