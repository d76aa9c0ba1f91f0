"""Located errors: source files, spans, diagnostics and the one formatter that prints them.

Every user mistake becomes a `Diagnostic` with a `Span`; a stage that finds one or more
raises `BenchError`, and the CLI prints them with `format_diagnostics` and exits 2.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import field
from functools import cached_property

from .records import frozen


@frozen
class Source:
    """A text the user gave us: a spec file, or a `--set` argument."""

    name: str  # what we print: the path as the user wrote it, or "<--set 1>"
    text: str = field(repr=False, compare=False)

    @cached_property
    def _lines(self) -> tuple[str, ...]:
        return tuple(line.removesuffix("\r") for line in self.text.split("\n"))

    @cached_property
    def _line_starts(self) -> list[int]:
        starts = [0]
        find = self.text.find
        at = find("\n")
        while at >= 0:
            starts.append(at + 1)
            at = find("\n", at + 1)
        return starts

    def lines(self) -> list[str]:
        """Lines as the parser counts them: split at '\n' only (not at form feeds etc.).
        Split once per source: a file with thousands of diagnostics stays linear."""
        return list(self._lines)

    def line_text(self, line: int) -> str:
        lines = self._lines
        return lines[line - 1] if 0 < line <= len(lines) else ""

    @property
    def last_position(self) -> tuple[int, int]:
        """(line, column) just after the last non-blank character; (1, 1) for an empty text."""
        lines = self._lines
        for index in range(len(lines) - 1, -1, -1):
            stripped = lines[index].rstrip()
            if stripped:
                return index + 1, len(stripped) + 1
        return 1, 1

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        line = bisect.bisect_right(self._line_starts, offset)
        return line, offset - self._line_starts[line - 1] + 1


@frozen
class Span:
    """A region of a source: 1-based line and column, end column exclusive."""

    source: Source
    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def point(cls, source: Source, line: int, column: int) -> Span:
        return cls(source, line, column, line, column + 1)

    @classmethod
    def start_of(cls, source: Source) -> Span:
        return cls.point(source, 1, 1)

    @classmethod
    def end_of(cls, source: Source) -> Span:
        line, column = source.last_position
        return cls.point(source, line, column)

    def __str__(self) -> str:
        return f"{self.source.name}:{self.line}:{self.column}"


@frozen
class Note:
    """A secondary location shown under a diagnostic (e.g. "first set here", "included from")."""

    message: str
    span: Span | None = None


@frozen
class Diagnostic:
    message: str
    span: Span | None
    hint: str | None = None
    notes: tuple[Note, ...] = ()
    severity: str = "error"


class BenchError(Exception):
    """One or more user errors, each located. Never a bug in benchc."""

    def __init__(self, diagnostics: Diagnostic | Sequence[Diagnostic]):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: tuple[Diagnostic, ...] = tuple(unique(diagnostics))
        super().__init__(self.diagnostics)

    def __str__(self) -> str:  # formatted when shown, not when raised (thousands may be raised)
        return format_diagnostics(self.diagnostics, color=False)


def error(message: str, span: Span | None, hint: str | None = None, **kwargs) -> BenchError:
    return BenchError(Diagnostic(message, span, hint, **kwargs))


def unique(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """Drop repeats (the same mistake found for every target or sweep point), keep order."""
    seen: set[tuple] = set()
    kept = []
    for diagnostic in diagnostics:
        key = (diagnostic.message, diagnostic.span, diagnostic.hint)
        if key not in seen:
            seen.add(key)
            kept.append(diagnostic)
    return kept


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """'did you mean 'x'?' for the closest choice, or None when nothing is close."""
    import difflib  # only when a mistake is explained

    close = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


def choices_hint(word: str, choices: Iterable[str], noun: str) -> str:
    """A hint naming the nearest choice (if any) and listing all of them."""
    options = sorted(set(choices))
    guess = did_you_mean(word, options)
    listing = f"{noun}: {', '.join(options)}"
    return f"{guess} {listing}" if guess else listing


# ------------------------------------------------------------------ formatting

_MAX_SHOWN_LINE = 200


def _excerpt(span: Span) -> list[str]:
    # Tabs as one space and unprintable characters as '?' keep the caret under its column.
    line = span.source.line_text(span.line).replace("\t", " ")
    text = "".join(c if c.isprintable() and c != "\ufffd" else "?" for c in line)
    if not text and span.line > 1 and not span.source.text:
        return []
    gutter = str(span.line)
    pad = " " * len(gutter)
    start = max(span.column - 1, 0)
    end = span.end_column - 1 if span.end_line == span.line else len(text)
    width = max(1, min(end, len(text)) - start) if start < len(text) else 1
    shown = text
    if len(shown) > _MAX_SHOWN_LINE:  # keep the caret visible on very long lines
        cut = max(0, start - 40)
        prefix = "..." if cut else ""
        shown = prefix + shown[cut : cut + _MAX_SHOWN_LINE] + "..."
        start = start - cut + len(prefix)
        width = min(width, _MAX_SHOWN_LINE)
    return [
        f"{pad} |",
        f"{gutter} | {shown}",
        f"{pad} | {' ' * start}{'^' * width}",
    ]


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """User text made safe for a terminal: control characters (an escape sequence in a preset
    name could clear the screen) shown as Python escapes; newlines and tabs kept."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def format_diagnostic(diagnostic: Diagnostic, color: bool = False) -> str:
    bold, red, cyan, reset = ("\033[1m", "\033[31m", "\033[36m", "\033[0m") if color else ("",) * 4
    where = printable(f"{diagnostic.span}: ") if diagnostic.span else ""
    message = printable(diagnostic.message)
    lines = [f"{bold}{where}{red}{diagnostic.severity}:{reset}{bold} {message}{reset}"]
    if diagnostic.span is not None:
        lines += _excerpt(diagnostic.span)
    for note in diagnostic.notes:
        where = printable(f"{note.span}: ") if note.span else ""
        lines.append(f"  {cyan}note:{reset} {where}{printable(note.message)}")
    if diagnostic.hint:
        lines.append(f"  {cyan}hint:{reset} {printable(diagnostic.hint)}")
    return "\n".join(lines)


MAX_SHOWN_PER_FILE = 50  # past this, a file's further diagnostics are counted, not printed


def format_diagnostics(diagnostics: Sequence[Diagnostic], color: bool = False) -> str:
    shown, hidden = [], {}
    per_file: dict[str, int] = {}
    for diagnostic in diagnostics:
        name = diagnostic.span.source.name if diagnostic.span else ""
        per_file[name] = per_file.get(name, 0) + 1
        if per_file[name] <= MAX_SHOWN_PER_FILE:
            shown.append(diagnostic)
        else:
            hidden[name] = hidden.get(name, 0) + 1
    body = "\n\n".join(format_diagnostic(d, color) for d in shown)
    for name, count in hidden.items():
        where = f" in {printable(name)}" if name else ""
        body += f"\n\n... and {count} more error{'s' if count != 1 else ''}{where} not shown"
    errors = sum(1 for d in diagnostics if d.severity == "error")
    summary = f"{errors} error{'s' if errors != 1 else ''} found" if errors else ""
    return f"{body}\n\n{summary}" if summary and len(diagnostics) > 1 else body
