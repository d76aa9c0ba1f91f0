"""The build manifest: one typed, versioned record of a build point, and its JSON Schema.

Code generation (codegen/points.py) builds a `Manifest` from the plan and writes `text()` as
the point's manifest.json; run, submit and ingest read it back with `Manifest.from_json(data)`,
which checks the data against `manifest_schema()` and returns the record or the first problem,
naming the field ("plan/measure: [] is not of type 'object'"). Each field of the records names
the place in the JSON it is read from and written to (`_json(...)`), so one walk reads every
field, `to_json()` writes them back, and a test holds the schema's properties and the records'
fields to each other (tests/test_manifest_record.py).

The plan is kept whole (`ManifestPlan.raw`), to be stored with each run; the fields of it that
the commands read are typed beside it. `ManifestPlan.read(plan)` also reads a plan kept in the
results store: such a plan is checked with the tolerant schema (`plan_properties(complete=False)`,
results/plans.py), as a run stored by an earlier benchc keeps fewer fields; a field it lacks
reads as the commands' default (1 node, 1 trial, 3600 s, no metric, no references, ...).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from functools import lru_cache

import jsonschema

from .catalog.targets import TARGETS
from .records import frozen
from .validate.schema import schema as bench_schema

MANIFEST_VERSION = 1
NOT_A_MANIFEST = "is not a benchc build manifest (version 1)"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # a name holding one is not a name benchc writes


# ---------------------------------------------------------------- fields and their place in the JSON


def _of(*types: type, default=None) -> Callable[[object], object]:
    """A reader: the value where it is of `types` (a bool is no number), else `default` (called
    where it is a type, for a fresh dict)."""

    def read(value):
        if isinstance(value, types) and (bool in types or not isinstance(value, bool)):
            return value
        return default() if isinstance(default, type) else default

    return read


_TEXT, _INT, _NUMBER, _DICT, _BOOL = _of(str), _of(int), _of(int, float), _of(dict), _of(bool)


def _json(*path: str, read=None, record=None, many: bool = False, checked: bool = True, **options):
    """A field read from (and written to) `path` of the JSON: by `read`, or as a `record` (the
    class's `read`; `many`: a list of them, a tuple in the record). `checked`: the schema has
    its type; else no command relies on it, and it is read for what it is (a value of another
    type reads as the default), as an older benchc's manifest may hold anything there."""
    metadata = {"at": path, "read": read, "record": record, "many": many, "checked": checked}
    return dataclasses.field(metadata=metadata, **options)


def _at(data, path: tuple[str, ...]):
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _read(cls, data) -> dict:
    """The values of `cls`'s JSON fields in `data`, each of its type or its default: never raises."""
    values = {}
    for f in dataclasses.fields(cls):
        if "at" not in f.metadata:
            continue
        value, record = _at(data, f.metadata["at"]), f.metadata["record"]
        if record is None:
            values[f.name] = f.metadata["read"](value)
        elif f.metadata["many"]:
            items = value if isinstance(value, (list, tuple)) else []  # a list, or a made plan's tuple
            values[f.name] = tuple(record.read(item) for item in items if isinstance(item, dict))
        else:
            values[f.name] = record.read(value)
    return values


def _write(record) -> dict:
    """The JSON of a record: each field at its place; None (a part not there) is left out."""
    data: dict = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if "at" not in f.metadata or value is None:
            continue
        if f.metadata["many"]:
            value = [item.to_json() for item in value]
        elif f.metadata["record"] is not None:
            value = value.to_json()
        *parents, last = f.metadata["at"]
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return data


# ---------------------------------------------------------------- the records


@frozen
class FileHash:
    """A file and the sha256 of its content: a file of the build point, or the spec or a file it
    includes."""

    path: str = _json("path", read=_TEXT)
    sha256: str | None = _json("sha256", read=_TEXT, checked=False)

    @classmethod
    def read(cls, data: dict) -> FileHash:
        return cls(**_read(cls, data))

    def to_json(self) -> dict:
        return _write(self)


@frozen
class Published:
    """A published figure the spec declares (the plan's references). A plan's schema requires
    none of its keys: a stored one may lack any."""

    label: str | None = _json("label", read=_TEXT)
    target: str | None = _json("target", read=_TEXT)  # None: any target
    value: float | None = _json("value", read=_NUMBER)
    unit: str | None = _json("unit", read=_TEXT)
    source: str | None = _json("source", read=_TEXT)
    where: dict | None = _json("where", read=_DICT)  # dotted setting -> value the point must have

    @classmethod
    def read(cls, data: dict) -> Published:
        return cls(**_read(cls, data))


_DERIVED = {"init": False, "compare": False}  # read from `raw` when the record is made


@frozen
class ManifestPlan:
    """The plan a build keeps (whole, in `raw`, for the store) and its fields that run, submit,
    ingest and report read. Made from the raw plan alone: what it lacks (a plan stored by an
    earlier benchc) or holds of another type reads as the default shown."""

    raw: dict = dataclasses.field(repr=False)
    family: str = _json("target", "family", read=_of(str, default="cpu"), **_DERIVED)
    nodes: int = _json("cluster", "nodes", read=_of(int, default=1), **_DERIVED)
    world_size: int = _json("cluster", "world_size", read=_INT, **_DERIVED)  # default: nodes
    repeat: int = _json("measure", "repeat", read=_of(int, default=1), **_DERIVED)  # trials per point
    timeout_s: float = _json("measure", "timeout_s", read=_of(int, float, default=3600.0), **_DERIVED)
    metric: str | None = _json("measure", "metric", read=_TEXT, **_DERIVED)  # the headline metric
    point_values: dict = _json("point_values", read=_of(dict, default=dict), **_DERIVED)
    # the workload's size, for progress: sequences (or images) per step, tokens of each
    global_batch: int | None = _json("workload", "global_batch", read=_INT, **_DERIVED)  # training
    batch: int | None = _json("workload", "batch", read=_INT, **_DERIVED)  # inference
    seq_len: int | None = _json("workload", "seq_len", read=_INT, **_DERIVED)
    output_tokens: int | None = _json("workload", "output_tokens", read=_INT, **_DERIVED)
    slurm_time: str | None = _json("slurm", "time", read=_TEXT, **_DERIVED)  # the spec's slurm.time
    description: str | None = _json("description", read=_TEXT, checked=False, **_DERIVED)
    references: tuple[Published, ...] = _json("references", record=Published, many=True, **_DERIVED)
    declared_references: tuple[Published, ...] = _json(
        "declared_references", record=Published, many=True, **_DERIVED
    )  # every one the spec declares; `references`: those that apply to this point
    prices: dict | None = _json("prices", read=_DICT, **_DERIVED)  # the spec's prices block
    roofline: dict | None = _json("roofline", read=_DICT, **_DERIVED)  # plan/roofline.py's record

    def __post_init__(self) -> None:
        values = _read(type(self), self.raw)
        if values["world_size"] is None:
            values["world_size"] = values["nodes"]
        for name, value in values.items():
            setattr(self, name, value)  # each field assigned once, as __init__ does

    @classmethod
    def read(cls, plan) -> ManifestPlan:
        """The plan of a manifest, or one kept in the store (None or not a dict: an empty plan)."""
        return cls(plan if isinstance(plan, dict) else {})

    @property
    def items_per_step(self) -> int | None:
        """What one step works through, for the progress line: sequences x tokens of each."""
        sequences = self.global_batch or self.batch or 0
        return sequences * (self.seq_len or self.output_tokens or 1) or None

    def to_json(self) -> dict:
        return self.raw


@frozen
class Manifest:
    """A build point's manifest.json: what it is (experiment, target, point, smoke), what built
    it (the spec and its files' hashes, the compiler), its files' hashes, and its plan."""

    experiment: str = _json("experiment", read=_TEXT)
    target: str = _json("target", read=_TEXT)
    point: str = _json("point", read=_TEXT)  # the sweep point's folder name, "default" without a sweep
    smoke: bool = _json("smoke", read=_BOOL)
    spec_path: str = _json("spec", "path", read=_TEXT)
    spec_sha256: str = _json("spec", "sha256", read=_TEXT)
    # the spec and the files it includes
    spec_files: tuple[FileHash, ...] = _json("spec", "files", record=FileHash, many=True, checked=False)
    files: tuple[FileHash, ...] = _json("files", record=FileHash, many=True)  # what the build wrote
    plan: ManifestPlan = _json("plan", record=ManifestPlan)
    # for people and tools, read by no command (None: the manifest has none, as an older one):
    # the compiler's name and version, how to launch the point, the library versions checked
    compiler: dict | None = _json("compiler", read=_DICT, checked=False, default=None)
    run: dict | None = _json("run", read=_DICT, checked=False, default=None)
    checked_with: dict | None = _json("checked_with", read=_DICT, checked=False, default=None)
    manifest_version: int = _json("manifest_version", read=_of(int, default=1), default=MANIFEST_VERSION)

    @classmethod
    def from_json(cls, data) -> Manifest | str:
        """The record of a manifest.json's content, or why it is not a manifest benchc wrote
        (NOT_A_MANIFEST, or a message naming the field)."""
        return manifest_problem(data) or cls(**_read(cls, data))

    def to_json(self) -> dict:
        return _write(self)

    def text(self) -> str:
        """manifest.json as written: deterministic (sorted keys; no time, no host)."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


# ---------------------------------------------------------------- the schema

_NAME = {"type": "string", "minLength": 1, "maxLength": 255}
_COUNT = {"type": "integer", "minimum": 1, "maximum": 1_000_000}
_TEXT_OR_NULL = {"type": ["string", "null"]}
_SIZE_OR_NULL = {"type": ["integer", "null"]}


def _spec_setting(*path: str) -> dict:
    """The bench schema's definition of a setting: _spec_setting("measure", "repeat")."""
    node = bench_schema()["$defs"][path[0]]
    for key in path[1:]:
        node = node["properties"][key]
    return node


@lru_cache(maxsize=2)
def plan_properties(complete: bool) -> dict:
    """The plan's fields that the commands read, with their types; `complete`: a manifest's,
    with the parts every build writes required and the fields only run and submit read
    (workload sizes, slurm.time), else a stored plan's (none required). Bounds a
    spec has (measure.repeat, a reference's value, a prices block) are the spec schema's."""
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
    properties = {
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
    if complete:
        sizes = ("global_batch", "batch", "seq_len", "output_tokens")
        properties["workload"] = {"type": "object", "properties": dict.fromkeys(sizes, _SIZE_OR_NULL)}
        properties["slurm"] = {"type": "object", "properties": {"time": _TEXT_OR_NULL}}
    return properties


def plan_schema() -> dict:
    """A manifest's plan: the fields every build writes are required."""
    return {
        "type": "object",
        "required": ["cluster", "measure", "target", "workload"],
        "properties": plan_properties(complete=True),
    }


@lru_cache(maxsize=1)
def manifest_schema() -> dict:
    """What the commands read of a manifest (the fields of the records not marked unchecked);
    the manifest holds more (the whole plan, the parts for people and tools), passed through."""
    return {
        "type": "object",
        "required": ["manifest_version", "experiment", "target", "point", "smoke", "spec", "plan", "files"],
        "properties": {
            "manifest_version": {"const": MANIFEST_VERSION},
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


def manifest_problem(data) -> str | None:
    """Why `data` (a manifest.json's content) is not a manifest benchc wrote, naming the field
    ("plan/measure: [] is not of type 'object'"), or None."""
    if (
        not isinstance(data, dict)
        or data.get("manifest_version") != MANIFEST_VERSION
        or "experiment" not in data
    ):
        return NOT_A_MANIFEST
    problem = first_problem(_validator().iter_errors(data))
    if problem:
        return problem
    for key in ("experiment", "target", "point"):
        if _CONTROL.search(data[key]) or "/" in data[key] or data[key] in (".", ".."):
            return f"{key} {data[key][:60]!r} is not a name benchc writes"
    return None
