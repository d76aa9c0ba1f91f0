"""The files of `benchc report -o DIR`: their names, and writing them into DIR.

Every file is made in memory first, then written by benchc's one folder writer: each under a
hidden temporary name in DIR, renamed over its name once all are written, so a report is never
half-written: a failure (a full disk, a chart that cannot be drawn, Ctrl-C or a signal) leaves
DIR as it was. A rename replaces a symbolic link in the way instead of writing through it, so
nothing lands outside DIR; a directory in the way of a name is refused as the user's mistake
(exit 2); everything else in DIR is kept.

File names are made from names in the store (experiments): letters, digits and . _ - only,
unique within one report, so they are safe in DIR and as the destination of a Markdown link.
"""

from __future__ import annotations

import hashlib
import io
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ..diagnostics import error
from .collect import Section
from .prices import Prices


def file_name(text: str) -> str:
    """A name from the store (an experiment) as one safe file name inside the output folder:
    letters, digits and . _ - only, no leading dot, at most 80 characters; a name that had to
    change gets a short hash of the original, so two names never meet in one file."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", text).lstrip(".")[:80] or "report"
    if safe != text:
        safe += "-" + _digest(text)
    return safe


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


class ChartNames:
    """File names of charts: `<stem>.png`, or where that is taken in this report (another
    section's stem that meets it once made safe) a longer name that is not."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def name(self, stem: str) -> str:
        base = file_name(stem)
        name, count = f"{base}.png", 1
        while name in self.used:
            name = f"{base}-{_digest(f'{stem}#{count}')}.png"
            count += 1
        self.used.add(name)
        return name


class OutputFolder:
    """DIR of `report -o DIR`, written all at once through benchc's one folder writer
    (compiler/folder_writer.py): add() each file, then commit(). Nothing reaches DIR before
    commit(), and commit() writes every file or none."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pending: dict[str, bytes] = {}  # name -> content, in the order added
        if path.exists() and not path.is_dir():
            raise error(f"cannot write reports into '{path}': it is a file, not a folder", None)

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc_info) -> None:
        self.pending.clear()

    def refuse_directory(self, final: Path) -> None:
        """A directory where a file of the report goes is the user's to move: refused."""
        try:
            in_the_way = stat.S_ISDIR(final.lstat().st_mode)  # a link to a directory is replaced
        except FileNotFoundError:
            return
        except OSError as exc:
            raise error(f"cannot write '{final}': {exc.strerror or exc}", None) from None
        if in_the_way:
            hint = "move the directory away, or choose another folder with -o DIR"
            raise error(f"-o/--out: '{final}' is a directory; the report cannot write its file there",
                        None, hint=hint)  # fmt: skip

    def add(self, name: str, write: Callable[[BinaryIO], object]) -> bool:
        """Make DIR/name's content by write(stream); False where write returned False (nothing
        to write)."""
        self.refuse_directory(self.path / name)
        stream = io.BytesIO()
        if write(stream) is False:
            return False
        self.pending[name] = stream.getvalue()
        return True

    def commit(self) -> list[Path]:
        """Write every file added; their paths, in the order they were added."""
        from ..folder_writer import FolderFiles, write_folders

        for name in self.pending:  # checked again: a directory may have appeared meanwhile
            self.refuse_directory(self.path / name)
        names = list(self.pending)
        write_folders([FolderFiles(self.path, dict(self.pending), report=True)], describe=lambda p: f"'{p}'")
        self.pending.clear()
        return [self.path / name for name in names]


def write_report(
    found: list[Section], out: Path, page_name: str, page_format: str, prices: Prices | None
) -> list[Path]:
    """The report page (`page_format`: md or html) and, where matplotlib is installed, each
    section's charts (its bars, its roofline, and where a run was profiled where its step's time
    goes), written into `out`; the files written, the page first."""
    from .render import html_page, key, markdown

    try:
        import matplotlib  # noqa: F401 - the run extra's; charts are drawn only where it is

        from .plot import bar_chart, roofline_chart
        from .profile import profile_chart
    except ImportError:
        bar_chart = roofline_chart = profile_chart = None
        print("benchc: no charts (matplotlib is not installed: pip install 'benchc[run]')", file=sys.stderr)
    charts: dict[tuple[str, bool], list[str]] = {}
    names = ChartNames()
    with OutputFolder(out) as folder:
        folder.refuse_directory(out / page_name)  # before any chart is drawn
        for section in found:
            if not section.rows or bar_chart is None:
                continue
            stem = section.experiment + ("-smoke" if section.smoke else "")
            bars, roofline = names.name(stem), names.name(stem + "-roofline")
            folder.add(bars, lambda stream, section=section: bar_chart(section, stream))
            charts[key(section)] = [bars]
            if folder.add(
                roofline, lambda stream, section=section: roofline_chart(section, stream) is not None
            ):
                charts[key(section)].append(roofline)  # only where a run can sit on a roofline
            if any(row.profile is not None for row in section.rows):
                profile = names.name(stem + "-profile")
                folder.add(profile, lambda stream, section=section: profile_chart(section, stream))
                charts[key(section)].append(profile)  # where a step's time goes
        page = markdown(found, charts, prices) if page_format == "md" else html_page(found, charts, prices)
        folder.add(page_name, lambda stream: stream.write(page.encode("utf-8")))
        written = folder.commit()
    return [written[-1], *written[:-1]]
