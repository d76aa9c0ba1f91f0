"""Numbers and units as benchc shows them: 3 significant figures, and units as people spell
them made comparable. The console, the plan's roofline and the reports all go through here."""

from __future__ import annotations

import math
import re

SMALLEST_DECIMAL, LARGEST_DECIMAL = 1e-6, 1e15  # beyond: e-notation, not a row of zeros
# what a cost or an energy is given per, by the throughput's unit: (units of work, as said)
PER = {"images/s": (1_000, "1,000 images"), "tokens/s": (1e6, "1M tokens"),
       "output tokens/s": (1e6, "1M output tokens")}  # fmt: skip


def sig(value: float | None, digits: int = 3) -> str:
    """A number to `digits` significant figures, thousands separated: 1254 -> '1,250',
    0.17399 -> '0.174', 12.0 -> '12.0'. Below a millionth or from 10^15 on, where decimals
    would be a row of zeros, in e-notation with as many figures: 1e-300 -> '1.00e-300'."""
    if value is None or not math.isfinite(value):
        return "-"
    if value == 0:
        return "0"
    if not SMALLEST_DECIMAL <= abs(float(f"{value:.{digits - 1}e}")) < LARGEST_DECIMAL:
        return f"{value:.{digits - 1}e}"
    decimals = digits - 1 - math.floor(math.log10(abs(value)))
    rounded = round(value, decimals)
    if rounded and math.floor(math.log10(abs(rounded))) > math.floor(math.log10(abs(value))):
        decimals -= 1  # 9.996 rounds up to 10.0: one decimal fewer keeps 3 figures
    return f"{rounded:,.{max(decimals, 0)}f}"


_SYNONYMS = ((r"\bimgs?\b", "images"), (r"\bimage\b(?!s)", "images"), (r"\btoks?\b", "tokens"),
             (r"/\s*sec(ond)?s?\b", "/s"), (r"\s+per\s+sec(ond)?\b", "/s"),
             (r"/\s*(device|gpu|hpu|card)\b", " per device"),
             (r"\bper\s+(gpu|hpu|card)\b", "per device"), (r"\s+", " "))  # fmt: skip


def normal_unit(unit: str) -> str:
    """Units as people spell them, made comparable: 'img/s' = 'images/s', 'tok/s/gpu' =
    'tokens/s per device'. Seconds per image keeps its own form."""
    text = unit.strip().lower()
    if re.fullmatch(r"s(ec(onds?)?)?\s*/\s*(image|img)", text):
        return "s/image"
    for pattern, replacement in _SYNONYMS:
        text = re.sub(pattern, replacement, text)
    return text.strip()


def finite_json(value):
    """`value` with every float that is not finite (an infinity from a figure divided by a
    denormal one, a NaN) as None, so that the JSON benchc writes is JSON: strict parsers
    refuse Infinity and NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(item) for item in value]
    return value
