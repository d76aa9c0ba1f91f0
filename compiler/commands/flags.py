"""Command-line flags several commands share: types for numeric flags (whole numbers and
seconds, finite and bounded, so `--timeout nan` or `--repeat 1e20` is refused by the parser,
exit 2), and the Slurm flags --partition, --account and --time checked as sbatch takes them
(submit, calibrate --submit)."""

from __future__ import annotations

import argparse
import json
import math
import re
from importlib import resources

from ..diagnostics import BenchError, Diagnostic, Source, Span


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


# What sbatch accepts for these flags (the spec's slurm block admits the same; see its schema).
SLURM_FLAGS = {
    "partition": (r"[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*", "partition names: letters, digits and . _ + -"),
    "account": (r"[A-Za-z0-9_.+-]+", "an account name: letters, digits and . _ + -"),
    "time": (r"\d{1,6}|\d{1,6}:[0-5]\d|\d{1,4}:[0-5]\d:[0-5]\d|\d{1,4}-\d{1,2}(:[0-5]\d(:[0-5]\d)?)?",
             'Slurm time: "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM" or "D-HH:MM:SS"'),
}  # fmt: skip


def slurm_options(args) -> list[str]:
    """sbatch options from the flags, each checked as the spec's slurm block would be."""
    options, problems = [], []
    for name, (pattern, words) in SLURM_FLAGS.items():
        value = getattr(args, name)
        if value is None:
            continue
        if not re.fullmatch(pattern, value):
            source = Source(f"--{name}", value)
            span = Span(source, 1, 1, 1, max(2, len(value) + 1))
            problems.append(Diagnostic(f"{value!r} is not a valid --{name}", span, hint=words))
            continue
        options.append(f"--{name}={value}")
    if problems:
        raise BenchError(problems)
    return options
