"""Device-hour prices a user gives `benchc report --prices FILE`, read with located errors.

benchc ships no prices and invents none: a price is the user's (a list price, a negotiated
rate, an amortised cost of owned machines). The file is TOML:

    currency = "USD"          # optional; a label only, no conversion is made
    electricity_per_kwh = 0.12  # optional: the energy each run measured, priced per kWh
    [per_device_hour]
    h100 = 4.10               # what one device of the target costs for one hour
    gaudi2 = 1.95

Every target named must be one benchc knows, every price from 0.0001 to 1,000,000 per
device-hour; a target of the report without a price gets no cost, and the report says so.
The file is read as named: a symbolic link is refused (an error never shows the lines of
another file), and so is one over 64 KiB or nested deeper than a prices file needs.
"""

from __future__ import annotations

import math
import os
import re
import stat
import tomllib
from pathlib import Path

from ..catalog.targets import TARGETS
from ..diagnostics import BenchError, Diagnostic, Source, Span, choices_hint, error
from ..frontend.source import structure_excess
from ..records import frozen

MAX_BYTES = 64 * 1024
MIN_PRICE = 1e-4  # per device-hour: far below any machine's
MAX_PRICE = 1e6  # per device-hour: far above any accelerator's
PRICE_RANGE = "from 0.0001 to 1,000,000 per device-hour"
KWH_RANGE = (1e-6, 1000.0)  # per kWh: from far below any tariff to far above any
MAX_NESTING = 16  # arrays and inline tables within each other; a prices file needs 1
CURRENCY = re.compile(r"[A-Za-z$€£¥]{1,8}")


@frozen
class Prices:
    currency: str
    per_device_hour: dict[str, float]
    path: str
    electricity_per_kwh: float | None = None  # the report prices the measured energy with it


def valid_price(value) -> bool:
    """A number of the price range (not a bool, not infinite, not NaN)."""
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            and MIN_PRICE <= value <= MAX_PRICE)  # fmt: skip


def valid_currency(value) -> bool:
    """A short label: 1 to 8 letters or currency signs, the whole of the text (no newline)."""
    return isinstance(value, str) and CURRENCY.fullmatch(value) is not None


def _line_of(source: Source, key: str) -> Span:
    """Where `key` is written: `key = ...`, `key.sub = ...` or a table header `[key]`, `[[key]]`
    (TOML parsers give no positions); the start of the file where it is not found."""
    quoted = rf"[\"']?{re.escape(key)}[\"']?"
    found = re.search(
        rf"^[ \t]*(?:\[\[?[ \t]*)?(?P<key>{quoted})[ \t]*(?:=|\.|\]|$)", source.text, re.MULTILINE
    )
    if not found:
        return Span.start_of(source)
    line, column = source.position(found.start("key"))
    return Span(source, line, column, line, column + len(found["key"]))


def _read(path: Path, name: str) -> bytes:
    """The bytes of the prices file as named: never through a symbolic link (refused before it
    is opened, and the open does not follow one), never a directory, FIFO or device, at most
    MAX_BYTES (however the file grows in between)."""
    limit = f"{MAX_BYTES // 1024} KiB"
    try:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            raise error(f"--prices: '{name}' is a symbolic link; name the prices file itself", None,
                        hint="benchc reads a prices file only as the file named")  # fmt: skip
        if stat.S_ISDIR(info.st_mode):
            raise error(f"--prices: '{name}' is a directory, not a prices file", None)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"--prices: '{name}' is not a regular file (a FIFO, socket or device)", None,
                        hint="a prices file is read from a file on disk")  # fmt: skip
        if info.st_size > MAX_BYTES:
            size = f"{math.ceil(info.st_size / 1024):,} KiB"
            raise error(f"--prices: '{name}' is {size}; a prices file is at most {limit}", None)
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(descriptor, "rb") as stream:
            opened = os.fstat(stream.fileno())
            same = (opened.st_dev, opened.st_ino) == (info.st_dev, info.st_ino)
            if not same or not stat.S_ISREG(opened.st_mode):
                raise error(f"--prices: '{name}' changed while it was read", None)
            raw = stream.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise error(f"--prices: no such file: '{name}'", None) from None
    except PermissionError:
        raise error(f"--prices: cannot read '{name}': permission denied", None) from None
    except OSError as exc:  # ELOOP: it became a link after it was looked at
        raise error(f"--prices: cannot read '{name}': {exc.strerror or exc}", None) from None
    if len(raw) > MAX_BYTES:  # it grew while it was read
        raise error(f"--prices: '{name}' is larger than {limit}", None)
    return raw


# TOML split for the nesting pre-scan: strings (multi-line first) and comments whole, so that
# the brackets inside them are not counted; an unclosed string runs as far as TOML reads it.
_TOML_LEXEMES = re.compile(
    r'"""(?:[^"\\]|\\[\s\S]|"(?!""))*(?:"{3,})?'  # multi-line basic string
    r"|'''[\s\S]*?(?:'{3,}|\Z)"  # multi-line literal string
    r'|"(?:[^"\\\n]|\\[\s\S])*"?'  # basic string, to the end of its line at most
    r"|'[^'\n]*'?"  # literal string
    r"|#[^\n]*"  # comment
    r"|[\[\]{}]|[^\"'#\[\]{}]+"
)


def _too_deep(text: str) -> int | None:
    """The offset of the first array or inline table opened more than MAX_NESTING deep, outside
    strings and comments (tomllib recurses once per level: a file nested hundreds deep would
    end in RecursionError); None where the nesting is within bounds. The pre-scan the spec
    reader and the untrusted-JSON reader share (frontend/source.py), with TOML's lexemes."""
    excess = structure_excess(text, _TOML_LEXEMES, MAX_NESTING, opening="[{", closing="]}")
    return None if excess is None else excess.offset


def _parse(text: str, source: Source, name: str) -> dict:
    """The TOML of a prices file, its errors located."""
    hint = "see `benchc report --help` for the prices file's layout"
    deep = _too_deep(text)
    if deep is not None:
        span = Span.point(source, *source.position(deep))
        raise error(f"'{name}' nests arrays or inline tables more than {MAX_NESTING} deep", span, hint=hint)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        span = Span.point(source, int(where[1]), int(where[2])) if where else Span.start_of(source)
        raise error(f"'{name}' is not TOML: {str(exc).split(' (at ')[0]}", span, hint=hint) from None
    except RecursionError:  # nesting the scan above did not see: refused all the same
        message = f"'{name}' nests arrays or inline tables too deep to read"
        raise error(message, Span.start_of(source), hint=hint) from None


def load_prices(path: Path) -> Prices:
    name = str(path)
    raw = _read(path, name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"--prices: '{name}' is not UTF-8 text", None) from None
    source = Source(name, text)
    data = _parse(text, source, name)
    problems: list[Diagnostic] = []
    for key in data:
        if key not in ("currency", "electricity_per_kwh", "per_device_hour"):
            hint = "a prices file holds currency, electricity_per_kwh and [per_device_hour]"
            problems.append(
                Diagnostic(f"unknown key '{key}' in a prices file", _line_of(source, key), hint=hint)
            )
    currency = data.get("currency", "USD")
    if not valid_currency(currency):
        problems.append(
            Diagnostic('currency must be a short label such as "USD"', _line_of(source, "currency"))
        )
        currency = "USD"
    table = data.get("per_device_hour")
    if not isinstance(table, dict) or not table:
        message = f"'{name}' has no [per_device_hour] table of prices"
        problems.append(Diagnostic(message, Span.start_of(source), hint="[per_device_hour]\nh100 = 4.10"))
        table = {}
    prices = {}
    for target, value in table.items():
        span = _line_of(source, target)
        if target not in TARGETS:
            problems.append(Diagnostic(f"unknown target '{target}' in the prices", span,
                                       hint=choices_hint(target, TARGETS, "targets")))  # fmt: skip
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(Diagnostic(f"the price of {target} must be a number per device-hour", span))
        elif not valid_price(value):
            bound = f"above 0 ({PRICE_RANGE})" if value <= 0 else PRICE_RANGE
            problems.append(Diagnostic(f"the price of {target} must be {bound}", span))
        else:
            prices[target] = float(value)
    electricity = data.get("electricity_per_kwh")
    if electricity is not None:
        low, high = KWH_RANGE
        number = not isinstance(electricity, bool) and isinstance(electricity, (int, float))
        if not number or not math.isfinite(electricity) or not low <= electricity <= high:
            message = f"electricity_per_kwh must be a number from {low:g} to {high:g} per kWh"
            problems.append(Diagnostic(message, _line_of(source, "electricity_per_kwh")))
            electricity = None
    if problems:
        raise BenchError(problems)
    return Prices(currency, prices, name, None if electricity is None else float(electricity))
