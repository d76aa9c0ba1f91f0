"""The `fmt` command: rewrite .bench files in the canonical style (compiler/frontend/format.py)."""

from __future__ import annotations

import contextlib
import difflib
import os
import stat
import sys
import tempfile
from pathlib import Path

from ..diagnostics import BenchError, error, format_diagnostics

EXIT_OK, EXIT_WOULD_CHANGE, EXIT_BUG, EXIT_USER = 0, 1, 1, 2
COMMANDS = ("fmt",)


def add_parsers(commands, variant_options) -> None:
    fmt_ = commands.add_parser(
        "fmt", help="rewrite .bench files in the canonical style, keeping every comment"
    )
    fmt_.add_argument("specs", nargs="+", metavar="SPEC")
    fmt_.add_argument(
        "--check", action="store_true",
        help="write nothing; exit 1 if a file would change (`would reformat FILE`)",
    )  # fmt: skip
    fmt_.add_argument(
        "--diff", action="store_true", help="write nothing; print a unified diff of each change"
    )


def fmt(args) -> int:
    from ..console import emit, raw
    from ..frontend.format import FormatError, format_source
    from ..frontend.source import display_name, read_source

    failed = broken = changed = False
    status = sys.stderr if args.diff else sys.stdout  # with --diff, stdout is a clean patch
    seen: set[str] = set()
    for spec in args.specs:
        path = Path(spec)
        if os.path.realpath(path) in seen:
            continue
        seen.add(os.path.realpath(path))
        name = display_name(path)
        try:
            source = read_source(path, name)  # refuses folders, FIFOs, binary files, ...
            original = _read(path, name)
            formatted = format_source(source)
            if formatted.encode("utf-8") == original:
                continue
            changed = True
            if args.diff:
                emit(sys.stdout, _diff(original.decode("utf-8", "replace"), formatted, name))
            if args.check:
                emit(status, f"would reformat {name}")
            elif not args.diff:
                _replace(path, formatted, name)
                emit(status, f"formatted {name}")
        except BenchError as exc:
            failed = True
            emit(raw(sys.stderr), format_diagnostics(exc.diagnostics, color=args.colour))
        except FormatError as exc:
            broken = True
            emit(sys.stderr, f"benchc: internal error: {exc} (please report this)")
    if failed:
        return EXIT_USER
    return EXIT_BUG if broken else EXIT_WOULD_CHANGE if changed and args.check else EXIT_OK


def _diff(before: str, after: str, name: str) -> str:
    shown = []
    for line in difflib.unified_diff(_lines(before), _lines(after), name, name):
        shown.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(shown).rstrip("\n")


def _lines(text: str) -> list[str]:
    """Lines as the grammar counts them: ended by '\n' only (a form feed is white space)."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _read(path: Path, name: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:  # gone or changed since read_source read it
        raise error(f"cannot read '{name}': {exc.strerror or exc}", None) from None


def _replace(path: Path, text: str, name: str) -> None:
    """Write `text` over the file atomically: a temporary file in its folder, then a rename;
    the file keeps its mode, and a symbolic link keeps pointing at it."""
    target = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise error(f"cannot write '{name}': {exc.strerror or exc}", None) from None
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(text.encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise error(f"cannot write '{name}': {exc.strerror or exc}", None) from None
