"""Metrics files: load one, validate it against the shipped schema, with located errors."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jsonschema

from ..diagnostics import Diagnostic, Span, error
from .untrusted_json import control_character, read_json_file

NAMES = ("experiment", "target", "point")  # they label reports and are looked up by users


@lru_cache(maxsize=1)
def metrics_schema() -> dict:
    return json.loads(resources.files("benchc.schemas").joinpath("metrics.schema.json").read_text())


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    """Built once: an ingest of 10,000 files validates 10,000 times."""
    return jsonschema.Draft202012Validator(metrics_schema())


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
    return data


def validation_problems(data: dict) -> list[Diagnostic]:
    return [Diagnostic(e.message, None) for e in _validator().iter_errors(data)]
