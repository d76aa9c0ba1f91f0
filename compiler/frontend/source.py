"""Read a spec file into a `Source`, refusing what is not a small UTF-8 text, with a location."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..diagnostics import Source, Span, error
from ..files import read_bounded

MAX_SPEC_BYTES = 1024 * 1024  # a spec is a page of settings; 1 MiB is generous
MAX_NESTING = 64  # brackets and braces; deeper input is refused before parsing
MAX_TOKENS = 20_000  # words, numbers, strings and punctuation; the largest reference spec holds 154


def display_name(path: Path) -> str:
    """The path as the user will recognise it: relative to the working directory when inside it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)
    return str(path) if relative.startswith("..") else relative


def read_source(path: Path, name: str | None = None, included_from: Span | None = None) -> Source:
    name = name or display_name(path)
    raw = read_bounded(
        path, name, "a .bench file", MAX_SPEC_BYTES, included_from or None,
        special_hint="benchc reads a spec from a file on disk; save it to a .bench file first",
        large_hint="a .bench file holds settings, not data; is this the right file?",
        show_first_line=True,
    )  # fmt: skip
    return decode_source(raw, name)


def decode_source(raw: bytes, name: str) -> Source:
    """Decode UTF-8 text; NUL bytes, invalid bytes and runaway nesting are located errors."""
    nul = raw.find(b"\x00")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        prefix = raw[: exc.start].decode("utf-8", errors="replace")
        source = Source(name, raw.decode("utf-8", errors="replace"))
        line, column = source.position(len(prefix))
        raise error(
            f"'{name}' is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            Span.point(source, line, column),
            hint="a .bench file is UTF-8 text; is this a binary file?",
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    source = Source(name, text)
    if nul >= 0:
        line, column = source.position(text.find("\x00"))
        raise error(
            "NUL byte in spec file",
            Span.point(source, line, column),
            hint="a .bench file is plain text; remove the NUL byte (is this a binary file?)",
        )
    _check_nesting(source)
    return source


# One pass over the text at C speed: strings, comments, brackets, words and other characters.
_LEXEME = re.compile(r'"(?:[^"\\\n]|\\.)*"?|#[^\n]*|//[^\n]*|[A-Za-z0-9_]+|\S')


def _check_nesting(source: Source) -> None:
    """Refuse absurd nesting, and more tokens than any spec holds, before the parser and
    the transformer spend time on them (linear, and cheap next to parsing)."""
    depth = tokens = 0
    for match in _LEXEME.finditer(source.text):
        lexeme = match.group()
        first = lexeme[0]
        if first == "#" or lexeme.startswith("//"):
            continue
        tokens += 1
        if tokens > MAX_TOKENS:
            line, column = source.position(match.start())
            raise error(
                f"more than {MAX_TOKENS:,} tokens in '{source.name}'",
                Span.point(source, line, column),
                hint="a spec is a page of settings (a reference spec has a few hundred tokens); "
                "is this file generated?",
            )
        if first in "[{(":
            depth += 1
            if depth > MAX_NESTING:
                line, column = source.position(match.start())
                raise error(
                    f"nesting deeper than {MAX_NESTING} levels",
                    Span.point(source, line, column),
                    hint="a spec needs a few levels of blocks and lists; is this file generated?",
                )
        elif first in "]})":
            depth = max(0, depth - 1)
