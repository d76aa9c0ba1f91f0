"""Read a build point's manifest.json as untrusted input: bounded, and every field that `run`,
`submit` and `ingest` rely on checked for its type, so an edited or damaged manifest is a
located error naming the field, never a traceback halfway through a run."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jsonschema

from ..diagnostics import Span, error
from ..results.plans import first_problem, plan_schema
from ..results.untrusted_json import control_character, read_json_file

_NAME = {"type": "string", "minLength": 1, "maxLength": 255}
NOT_A_MANIFEST = "is not a benchc build manifest (version 1)"


@lru_cache(maxsize=1)
def manifest_schema() -> dict:
    """What the commands read; the manifest holds more (the whole plan), which they pass through.
    The plan's part is results/plans.py's, shared with the check of stored plans."""
    return {
        "type": "object",
        "required": ["manifest_version", "experiment", "target", "point", "smoke", "spec", "plan", "files"],
        "properties": {
            "manifest_version": {"const": 1},
            "experiment": _NAME,
            "target": _NAME,
            "point": _NAME,
            "smoke": {"type": "boolean"},
            "spec": {
                "type": "object",
                "required": ["path", "sha256"],
                "properties": {"path": {"type": "string"}, "sha256": {"type": "string"}},
            },
            "files": {
                "type": "array",
                "items": {"type": "object", "required": ["path"], "properties": {"path": _NAME}},
            },
            "plan": plan_schema(),
        },
    }


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(manifest_schema())


def manifest_problem(data) -> str | None:
    """Why `data` (a manifest.json's content) is not a manifest benchc wrote, naming the field
    ("plan/measure: [] is not of type 'object'"), or None."""
    if not isinstance(data, dict) or data.get("manifest_version") != 1 or "experiment" not in data:
        return NOT_A_MANIFEST
    problem = first_problem(_validator().iter_errors(data))
    if problem:
        return problem
    for key in ("experiment", "target", "point"):
        if control_character(data[key]) or "/" in data[key] or data[key] in (".", ".."):
            return f"{key} {data[key][:60]!r} is not a name benchc writes"
    return None


def read_manifest(path: Path) -> dict:
    """The manifest at `path`, or a BenchError saying which field is wrong."""
    data, source = read_json_file(path, "build manifest")
    problem = manifest_problem(data)
    if problem == NOT_A_MANIFEST:
        raise error(f"{path} {problem}", Span.start_of(source),
                    hint="compile the spec again: benchc compile SPEC -o DIR")  # fmt: skip
    if problem:
        raise error(f"{path}: {problem}", Span.start_of(source),
                    hint="the manifest was edited or damaged; compile the spec again to rewrite "
                    "it")  # fmt: skip
    return data
