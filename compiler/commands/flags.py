"""Types for numeric command-line flags: whole numbers and seconds, finite and bounded, so a
flag such as `--timeout nan` or `--repeat 1e20` is refused by the parser (exit 2)."""

from __future__ import annotations

import argparse
import json
import math
from importlib import resources


def _spec_bound(section: str, setting: str) -> int:
    """The largest value the spec's schema allows a setting (compiler/validate/bench.schema.json),
    read here without jsonschema: the parser is built for every command."""
    text = resources.files("benchc.validate").joinpath("bench.schema.json").read_text("utf-8")
    return json.loads(text)["$defs"][section]["properties"][setting]["maximum"]


MAX_REPEAT = _spec_bound("measure", "repeat")  # trials of one point: --repeat as measure.repeat
MAX_SECONDS = _spec_bound("measure", "timeout")  # a week: as measure.timeout


def whole_number(low: int, high: int):
    """An argparse type for an integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got '{text[:40]}'") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a number from {low:,} to {high:,}, got {text[:40]}")
        return value

    return parse


def seconds(text: str) -> float:
    """An argparse type for a positive, finite number of seconds, at most a week."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got '{text[:40]}'") from None
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of seconds up to {MAX_SECONDS:,} (a week), got {text[:40]}"
        )
    return value


repeat = whole_number(1, MAX_REPEAT)
