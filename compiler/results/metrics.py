"""Metrics files: load one, validate it against the shipped schema and its names against the
rules a spec's names follow, with located errors."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jsonschema

from ..catalog.targets import TARGETS
from ..diagnostics import BenchError, Diagnostic, Span, choices_hint, error
from ..frontend.document import MAX_NAME_CHARS
from ..validate.semantic import MAX_EXPERIMENT_CHARS
from .untrusted_json import control_character, read_json_file

NAMES = ("experiment", "target", "point")  # they label reports and are looked up by users
# A sweep point's name, as plan/variants.py makes it: setting names and values with every other
# character replaced by _, joined by - and _; it names a build folder (at most MAX_NAME_CHARS).
POINT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


@lru_cache(maxsize=1)
def metrics_schema() -> dict:
    return json.loads(resources.files("benchc.schemas").joinpath("metrics.schema.json").read_text())


TIMESTAMPS = jsonschema.FormatChecker(formats=())  # the schema's "date-time", checked for real


@TIMESTAMPS.checks("date-time", raises=ValueError)
def _timestamp(value) -> bool:
    """An ISO 8601 time with its offset from UTC (as programs write them), not more than a day
    ahead of this machine's clock: a run's times order the store ("the latest run"), so a
    file that says "zzz" or the year 9999 would shadow every real run."""
    if not isinstance(value, str):
        return True  # the type is the schema's own check
    when = datetime.fromisoformat(value)
    if when.tzinfo is None:
        raise ValueError(f"{value!r} has no offset from UTC")
    if when > datetime.now(UTC) + timedelta(days=1):
        raise ValueError(f"{value!r} is in the future")
    return True


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    """Built once: an ingest of 10,000 files validates 10,000 times."""
    return jsonschema.Draft202012Validator(metrics_schema(), format_checker=TIMESTAMPS)


def load_metrics(path: Path) -> dict:
    """The metrics in `path`, or a BenchError saying where and why it is not a metrics file."""
    name = str(path)
    data, source = read_json_file(path, "metrics file")
    if not isinstance(data, dict) or data.get("schema") != "benchc-metrics":
        raise error(
            f"'{name}' is not a benchc metrics file",
            Span.start_of(source),
            hint='a metrics file has "schema": "benchc-metrics" (written by a generated program)',
        )
    problems = sorted(_validator().iter_errors(data), key=str)
    if problems:
        raise error(
            f"'{name}' does not match the benchc metrics schema: "
            + "; ".join(
                f"{'/'.join(map(str, p.absolute_path)) or 'top level'}: {p.message}" for p in problems[:5]
            ),  # fmt: skip
            Span.start_of(source),
            hint="compiler/schemas/metrics.schema.json documents every field",
        )
    for key in NAMES:
        if control_character(data[key]):
            raise error(
                f"'{name}': the {key} name {data[key][:60]!r} holds a control character",
                Span.start_of(source),
                hint="names in a metrics file come from a spec, which never holds them",
            )
    # no excerpt of the file: its line would show the name as it is (a U+202E reorders the line)
    problems = [Diagnostic(f"'{name}': {message}", None, hint=hint) for message, hint in name_problems(data)]
    if (why := profile_problem(data.get("profile"))) is not None:
        problems.append(Diagnostic(f"'{name}': its profile {why}", None,
                                   hint="a profile's categories share out the profiled time"))  # fmt: skip
    if problems:
        raise BenchError(problems)
    return data


@lru_cache(maxsize=1)
def experiment_name() -> re.Pattern:
    """The grammar's NAME, which an experiment's name is (grammar/bench.lark)."""
    grammar = resources.files("benchc.grammar").joinpath("bench.lark").read_text("utf-8")
    return re.compile(re.search(r"^NAME:\s*/(.+)/\s*$", grammar, re.MULTILINE).group(1))


def shown(name: str) -> str:
    """A name from a file, quoted for a message: escapes for what is not ASCII (a right-to-left
    override would reorder the terminal's line), cut at 60 characters."""
    return ascii(name[:60]) + ("..." if len(name) > 60 else "")


def name_problems(metrics: dict) -> list[tuple[str, str]]:
    """(message, hint) for each of the experiment, target and point names that a spec could not
    have given: a spec's experiment is a NAME of at most MAX_EXPERIMENT_CHARS characters, its
    targets are benchc's, its points are named as plan/variants.py names them."""
    found = []
    experiment, target, point = (metrics[key] for key in NAMES)
    origin = "a metrics file's names come from its spec, as benchc compiled it: was this file edited?"
    if not experiment_name().fullmatch(experiment):
        rule = "an experiment's name is a letter or _, then letters, digits and _"
        found.append((f"experiment {shown(experiment)} is not a name a spec can give", f"{rule}; {origin}"))
    elif len(experiment) > MAX_EXPERIMENT_CHARS:
        found.append((f"the experiment name is {len(experiment):,} characters long; a spec's limit is "
                      f"{MAX_EXPERIMENT_CHARS}", origin))  # fmt: skip
    if target not in TARGETS:
        found.append((f"unknown target {shown(target)}", choices_hint(target, TARGETS, "known targets")))
    if not POINT_NAME.fullmatch(point) or len(point) > MAX_NAME_CHARS:
        found.append((f"point {shown(point)} is not a point name benchc gives",
                      f"a point's name is letters, digits and _ . + - (at most {MAX_NAME_CHARS}), "
                      "not starting with . + or -; " + origin))  # fmt: skip
    return found


def validation_problems(data: dict) -> list[Diagnostic]:
    return [Diagnostic(e.message, None) for e in _validator().iter_errors(data)]


# How far a profile's categories may add up past its wall time: one timeline on the CPU (a few
# percent of rounding), several streams overlapping on an accelerator (compute, communication
# and copies at once).
PROFILE_OVERLAP = {"cpu": 1.05, "cuda": 4.0, "hpu": 4.0}


def profile_problem(profile) -> str | None:
    """Why a metrics file's profile cannot be the time of its steps (None: it can be, or there
    is none): its categories add up past what its profiled time allows."""
    if not isinstance(profile, dict) or not isinstance(profile.get("categories"), dict):
        return None
    wall, activity = profile.get("profiled_s"), profile.get("activity")
    seconds = [
        v for v in profile["categories"].values() if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    if not isinstance(wall, int | float) or activity not in PROFILE_OVERLAP:
        return None
    total, most = sum(seconds), PROFILE_OVERLAP[activity] * wall + 1e-3
    if total > most:
        return (f"adds up to {total:.4g} s of device time in {wall:.4g} s profiled on {activity}: more than "
                f"{PROFILE_OVERLAP[activity]:g}x its time, which no {activity} can spend")  # fmt: skip
    return None
