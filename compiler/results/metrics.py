"""Metrics files: load one, validate it against the shipped schema, with located errors."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jsonschema

from ..diagnostics import Diagnostic, Source, Span, error


@lru_cache(maxsize=1)
def metrics_schema() -> dict:
    return json.loads(resources.files("benchc.schemas").joinpath("metrics.schema.json").read_text())


def load_metrics(path: Path) -> dict:
    """The metrics in `path`, or a BenchError saying where and why it is not a metrics file."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"no such file: '{name}'", None) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read '{name}': {exc}", None) from None
    source = Source(name, text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(
            f"'{name}' is not JSON: {exc.msg}",
            Span.point(source, exc.lineno, exc.colno),
            hint="a metrics file is the JSON a generated program writes (metrics.json)",
        ) from None
    if not isinstance(data, dict) or data.get("schema") != "benchc-metrics":
        raise error(
            f"'{name}' is not a benchc metrics file",
            Span.start_of(source),
            hint='a metrics file has "schema": "benchc-metrics" (written by a generated program)',
        )
    problems = sorted(jsonschema.Draft202012Validator(metrics_schema()).iter_errors(data), key=str)
    if problems:
        raise error(
            f"'{name}' does not match the benchc metrics schema: "
            + "; ".join(
                f"{'/'.join(map(str, p.absolute_path)) or 'top level'}: {p.message}" for p in problems[:5]
            ),  # fmt: skip
            Span.start_of(source),
            hint="compiler/schemas/metrics.schema.json documents every field",
        )
    return data


def validation_problems(data: dict) -> list[Diagnostic]:
    validator = jsonschema.Draft202012Validator(metrics_schema())
    return [Diagnostic(e.message, None) for e in validator.iter_errors(data)]
