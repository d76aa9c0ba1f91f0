"""The plan a run keeps (from its build's manifest), checked for what the commands read from it.

`run`, `submit` and `ingest` check a manifest's plan with PLAN_SCHEMA before anything is stored
(runner/manifest.py); `runs` and `report` check each stored plan again with STORED_PLAN_SCHEMA
(no field required: runs stored by an earlier benchc keep fewer), because a store may have been
written by an earlier benchc or edited: a row whose plan does not match is shown as invalid
with the reason, never read into a traceback. Bounds a spec has (measure.repeat, a reference's
value, a prices block) are read from the spec's own schema, compiler/validate/bench.schema.json.
"""

from __future__ import annotations

import json
from functools import lru_cache

import jsonschema

from ..catalog.targets import TARGETS
from ..validate.schema import schema as bench_schema

_COUNT = {"type": "integer", "minimum": 1, "maximum": 1_000_000}
_TEXT_OR_NULL = {"type": ["string", "null"]}


def _spec_setting(*path: str) -> dict:
    """The bench schema's definition of a setting: _spec_setting("measure", "repeat")."""
    node = bench_schema()["$defs"][path[0]]
    for key in path[1:]:
        node = node["properties"][key]
    return node


@lru_cache(maxsize=2)
def plan_properties(complete: bool) -> dict:
    """The plan's fields that the commands read, with their types; `complete`: with the parts
    of them every build writes required (a manifest), else none required (a stored plan)."""
    repeat = _spec_setting("measure", "repeat")
    timeout = _spec_setting("measure", "timeout")
    reference = {
        "type": "object",
        "properties": {
            "label": {"type": "string"},
            "target": _TEXT_OR_NULL,
            "value": _spec_setting("reference", "value"),
            "unit": _spec_setting("reference", "unit"),
            "source": _TEXT_OR_NULL,
            "where": {"type": ["object", "null"]},
        },
    }
    prices = _spec_setting("prices")
    return {
        "cluster": {
            "type": "object",
            "required": ["nodes", "world_size"] if complete else [],
            "properties": {"nodes": _COUNT, "world_size": _COUNT},
        },
        "measure": {
            "type": "object",
            "required": ["repeat", "timeout_s"] if complete else [],
            "properties": {
                "repeat": {"type": "integer", "minimum": repeat["minimum"], "maximum": repeat["maximum"]},
                "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": timeout["maximum"]},
                "metric": {"type": "string"},
            },
        },
        "target": {
            "type": "object",
            "required": ["family"] if complete else [],
            "properties": {"family": {"enum": sorted({t.family for t in TARGETS.values()})}},
        },
        "workload": {"type": "object"},
        "point_values": {"type": "object"},
        "references": {"type": "array", "items": reference},
        "declared_references": {"type": "array", "items": reference},
        "prices": {**prices, "type": ["object", "null"], "required": ["currency", "per_device_hour"]},
        "roofline": {
            "type": ["object", "null"],
            "properties": {
                "lower_is_better": {"type": "boolean"},
                "phases": {
                    "type": ["array", "null"],
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "binding": _TEXT_OR_NULL},
                    },
                },
            },
        },
    }


def plan_schema() -> dict:
    """A manifest's plan: the fields every build writes are required."""
    return {
        "type": "object",
        "required": ["cluster", "measure", "target", "workload"],
        "properties": plan_properties(complete=True),
    }


@lru_cache(maxsize=1)
def _stored_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"type": "object", "properties": plan_properties(complete=False)})


def first_problem(errors, prefix: str = "") -> str | None:
    """'plan/measure: ['x'] is not of type 'object' (and 2 more)' for the first of the schema's
    errors (in the order of their place in the document), or None where there is none."""
    found = sorted(errors, key=lambda e: [str(part) for part in e.absolute_path])
    if not found:
        return None
    parts = [str(part) for part in found[0].absolute_path]
    where = "/".join([prefix, *parts] if prefix else parts)
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{where or 'top level'}: {_short(found[0])}{more}"


def _short(problem: jsonschema.ValidationError) -> str:
    """The schema's message with the value it quotes cut short (a 5,000-character name)."""
    quoted = repr(problem.instance)
    if len(quoted) <= 80:
        return problem.message[:300]
    return problem.message.replace(quoted, f"{quoted[:60]}... ({len(quoted):,} characters)")[:300]


_CHECKED: dict[str, str | None] = {}  # plan text -> its problem: the trials of a point share one plan


def stored_plan_problem(plan) -> str | None:
    """Why a stored plan cannot be read, or None (a run may have kept no plan at all)."""
    if plan is None:
        return None
    text = json.dumps(plan, sort_keys=True)
    if text not in _CHECKED:
        if len(_CHECKED) > 1000:
            _CHECKED.clear()
        _CHECKED[text] = first_problem(_stored_validator().iter_errors(plan), "plan")
    return _CHECKED[text]
