"""Read a build point's manifest.json as untrusted input: bounded, and every field that `run`,
`submit` and `ingest` rely on checked for its type, so an edited or damaged manifest is a
located error naming the field, never a traceback halfway through a run."""

from __future__ import annotations

from pathlib import Path

import jsonschema

from ..diagnostics import Span, error
from ..results.untrusted_json import control_character, read_json_file

_NAME = {"type": "string", "minLength": 1, "maxLength": 255}
_COUNT = {"type": "integer", "minimum": 1, "maximum": 1_000_000}

# What the commands read; the manifest holds more (the whole plan), which they pass through.
MANIFEST_SCHEMA = {
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
        "plan": {
            "type": "object",
            "required": ["cluster", "measure", "target", "workload"],
            "properties": {
                "cluster": {
                    "type": "object",
                    "required": ["nodes", "world_size"],
                    "properties": {"nodes": _COUNT, "world_size": _COUNT},
                },
                "measure": {
                    "type": "object",
                    "required": ["repeat", "timeout_s"],
                    "properties": {
                        "repeat": {"type": "integer", "minimum": 1, "maximum": 1000},
                        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 7 * 86400},
                        "metric": {"type": "string"},
                    },
                },
                "target": {
                    "type": "object",
                    "required": ["family"],
                    "properties": {"family": {"enum": ["cpu", "cuda", "gaudi"]}},
                },
                "workload": {"type": "object"},
                "point_values": {"type": "object"},
            },
        },
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(MANIFEST_SCHEMA)


def read_manifest(path: Path) -> dict:
    """The manifest at `path`, or a BenchError saying which field is wrong."""
    data, source = read_json_file(path, "build manifest")
    if not isinstance(data, dict) or data.get("manifest_version") != 1 or "experiment" not in data:
        raise error(f"{path} is not a benchc build manifest (version 1)", Span.start_of(source),
                    hint="compile the spec again: benchc compile SPEC -o DIR")  # fmt: skip
    problems = sorted(_VALIDATOR.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if problems:
        first = problems[0]
        field = "/".join(map(str, first.absolute_path)) or "top level"
        raise error(
            f"{path}: {field}: {first.message[:200]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
            Span.start_of(source),
            hint="the manifest was edited or damaged; compile the spec again to rewrite it",
        )
    for key in ("experiment", "target", "point"):
        if control_character(data[key]) or "/" in data[key] or data[key] in (".", ".."):
            raise error(f"{path}: {key} {data[key][:60]!r} is not a name benchc writes",
                        Span.start_of(source), hint="compile the spec again to rewrite it")  # fmt: skip
    return data
