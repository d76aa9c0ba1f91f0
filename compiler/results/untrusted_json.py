"""Read a JSON file that came from elsewhere (a metrics file, a build's manifest) within bounds:
a regular file, at most a size, nesting at most a depth, numbers finite and of sane magnitude,
strings valid Unicode. Anything else is a located BenchError, never a traceback or a hang."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from ..diagnostics import Source, Span, error
from ..files import read_bounded
from ..frontend.source import structure_excess

MAX_BYTES = 16 * 2**20  # a metrics file of 10,000 steps is about 1 MiB
MAX_DEPTH = 32  # metrics nest 3 levels; a manifest 6
MAX_INTEGER_DIGITS = 20  # 64-bit counters; Python refuses to read past 4,300 digits
MAX_MAGNITUDE = 1e30  # above any FLOP count, byte count or rate a benchmark records

_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A lone surrogate can only come from a \uD800-\uDFFF escape: the text was valid UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _Refused(ValueError):
    """A value json.loads must not build."""


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-')):,} digits is too large")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
        raise _Refused(f"the number {text[:40]} is too large (at most {MAX_MAGNITUDE:g})")
    return value


def _constant(text: str):
    raise _Refused(f"{text} is not a number JSON allows (the measurement is not finite)")


def read_json_file(path: Path, what: str) -> tuple[object, Source]:
    """The data in `path` and its source text; `what` names the kind of file in messages."""
    name = str(path)
    raw = read_bounded(Path(path), name, f"a {what}", MAX_BYTES,
                       large_hint=f"is this the right file? a {what} holds one run's figures")  # fmt: skip
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"'{name}' is not UTF-8 text (bad byte at offset {exc.start})", None) from None
    source = Source(name, text)
    _check_depth(source, what)
    try:
        data = json.loads(text, parse_int=_integer, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise error(f"'{name}' is not JSON: {exc.msg}", Span.point(source, exc.lineno, exc.colno),
                    hint=f"a {what} is JSON") from None  # fmt: skip
    except _Refused as exc:
        raise error(f"'{name}': {exc}", Span.start_of(source)) from None
    except RecursionError:  # not reached after _check_depth; kept as a last guard
        raise error(f"'{name}' is nested too deeply", Span.start_of(source)) from None
    problem = _bad_string(data) if _SURROGATE_ESCAPE.search(text) else None
    if problem:
        raise error(f"'{name}': {problem}", Span.start_of(source))
    return data, source


def _check_depth(source: Source, what: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH before json.loads recurses into it (brackets in
    strings do not count; a stray closer is json.loads's to refuse, so it is not clamped)."""
    excess = structure_excess(source.text, _STRUCTURE, MAX_DEPTH, opening="[{", closing="]}", clamp=False)
    if excess is not None:
        line, column = source.position(excess.offset)
        raise error(
            f"'{source.name}' is nested deeper than {MAX_DEPTH} levels",
            Span.point(source, line, column),
            hint=f"a {what} nests a few levels; this is not one",
        )


def _bad_string(data, depth: int = 0) -> str | None:
    """A lone surrogate (\\ud800) cannot be stored or printed: find the first one."""
    if isinstance(data, str):
        try:
            data.encode("utf-8")
        except UnicodeEncodeError:
            return f"the string {data[:40]!r} holds a lone surrogate (not valid Unicode)"
        return None
    if isinstance(data, dict):
        items = [*data.keys(), *data.values()]
    elif isinstance(data, list):
        items = data
    else:
        return None
    for item in items:
        found = _bad_string(item, depth + 1)
        if found:
            return found
    return None


def control_character(text: str) -> bool:
    """Whether a name holds a control character (NUL, newline, escape...)."""
    return bool(_CONTROL.search(text))
