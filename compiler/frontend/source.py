"""Read a spec file into a `Source`, refusing what is not a small UTF-8 text, with a location.

Also the bounded-structure pre-scan (`structure_excess`) the readers of untrusted text share:
it finds nesting too deep (or too many tokens) in one linear pass, before a recursive parser
could end in RecursionError; each caller keeps its own limits and messages."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

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


class Excess(NamedTuple):
    """What a pre-scan found first: `kind` is "depth" or "tokens"; `offset` where that lexeme starts."""

    kind: str
    offset: int


def structure_excess(text: str, lexemes: re.Pattern[str], max_depth: int, *, opening: str = "[{(",
                     closing: str = "]})", skipped: tuple[str, ...] = (), max_tokens: int | None = None,
                     clamp: bool = True) -> Excess | None:  # fmt: skip
    """The first lexeme that opens more than `max_depth` levels, or (with `max_tokens`) is one
    token too many; None where the text is within bounds. One linear pass at C speed.

    `lexemes` splits the text: strings and comments must be whole lexemes, so that the brackets
    inside them are not counted; a lexeme counts by its first character, opening when it is in
    `opening`, closing when in `closing`. Lexemes starting with one of `skipped` (comments) are
    neither tokens nor brackets. A closer with nothing open leaves the depth at 0 with `clamp`;
    without it the depth goes below 0 (text that a parser refuses at that closer anyway). Without
    a token limit, text with at most `max_depth` openers in all is passed without a scan."""
    if max_tokens is None and sum(map(text.count, opening)) <= max_depth:
        return None  # fewer openers cannot nest deeper
    depth = tokens = 0
    for match in lexemes.finditer(text):
        lexeme = match.group()
        if skipped and lexeme.startswith(skipped):
            continue
        tokens += 1
        if max_tokens is not None and tokens > max_tokens:
            return Excess("tokens", match.start())
        first = lexeme[0]
        if first in opening:
            depth += 1
            if depth > max_depth:
                return Excess("depth", match.start())
        elif first in closing:
            depth = max(0, depth - 1) if clamp else depth - 1
    return None


def _check_nesting(source: Source) -> None:
    """Refuse absurd nesting, and more tokens than any spec holds, before the parser and
    the transformer spend time on them (linear, and cheap next to parsing)."""
    excess = structure_excess(source.text, _LEXEME, MAX_NESTING, skipped=("#", "//"), max_tokens=MAX_TOKENS)
    if excess is None:
        return
    span = Span.point(source, *source.position(excess.offset))
    if excess.kind == "tokens":
        raise error(
            f"more than {MAX_TOKENS:,} tokens in '{source.name}'",
            span,
            hint="a spec is a page of settings (a reference spec has a few hundred tokens); "
            "is this file generated?",
        )
    raise error(
        f"nesting deeper than {MAX_NESTING} levels",
        span,
        hint="a spec needs a few levels of blocks and lists; is this file generated?",
    )
