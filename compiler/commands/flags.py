"""Types for numeric command-line flags: whole numbers and seconds, finite and bounded, so a
flag such as `--timeout nan` or `--repeat 1e20` is refused by the parser (exit 2)."""

from __future__ import annotations

import argparse
import math

MAX_REPEAT = 1000  # trials of one point in one command
MAX_SECONDS = 7 * 86400  # a week: past any benchmark's time limit


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
