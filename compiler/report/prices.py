"""Device-hour prices a user gives `benchc report --prices FILE`, read with located errors.

benchc ships no prices and invents none: a price is the user's (a list price, a negotiated
rate, an amortised cost of owned machines). The file is TOML:

    currency = "USD"          # optional; a label only, no conversion is made
    [per_device_hour]
    h100 = 4.10               # what one device of the target costs for one hour
    gaudi2 = 1.95

Every target named must be one benchc knows; a target of the report without a price gets no
cost, and the report says so.
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

from ..catalog.targets import TARGETS
from ..diagnostics import BenchError, Diagnostic, Source, Span, choices_hint, error
from ..files import read_bounded
from ..records import frozen

MAX_BYTES = 64 * 1024
MAX_PRICE = 1e6  # per device-hour: far above any accelerator's


@frozen
class Prices:
    currency: str
    per_device_hour: dict[str, float]
    path: str


def _line_of(source: Source, key: str) -> Span:
    """Where `key = ...` is written (TOML parsers give no positions for values)."""
    found = re.search(rf"^[ \t]*\"?{re.escape(key)}\"?[ \t]*=", source.text, re.MULTILINE)
    if not found:
        return Span.start_of(source)
    line, column = source.position(found.start() + len(found.group()) - len(found.group().lstrip()))
    return Span(source, line, column, line, column + len(key))


def load_prices(path: Path) -> Prices:
    name = str(path)
    raw = read_bounded(path, name, "a prices file", MAX_BYTES, prefix="--prices: ")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"--prices: '{name}' is not UTF-8 text", None) from None
    source = Source(name, text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        span = Span.point(source, int(where[1]), int(where[2])) if where else Span.start_of(source)
        raise error(f"'{name}' is not TOML: {str(exc).split(' (at ')[0]}", span,
                    hint="see `benchc report --help` for the prices file's layout") from None  # fmt: skip
    problems: list[Diagnostic] = []
    for key in data:
        if key not in ("currency", "per_device_hour"):
            hint = "a prices file holds currency and [per_device_hour]"
            problems.append(
                Diagnostic(f"unknown key '{key}' in a prices file", _line_of(source, key), hint=hint)
            )
    currency = data.get("currency", "USD")
    if not isinstance(currency, str) or not re.fullmatch(r"[A-Za-z$€£¥]{1,8}", currency):
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
        elif not 0 < value <= MAX_PRICE:
            problems.append(
                Diagnostic(f"the price of {target} must be above 0 and at most {MAX_PRICE:g}", span)
            )
        else:
            prices[target] = float(value)
    if problems:
        raise BenchError(problems)
    return Prices(currency, prices, name)
