"""The build manifest's record (compiler/manifest.py): what code generation writes reads back as
the same record and the same JSON; every manifest the reference specs compile loads; a manifest
missing a required field, or holding a value of the wrong type, gives the message it always
has; the schema's properties and the records' fields agree; a stored plan reads tolerantly."""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
from pathlib import Path

import pytest

from benchc.codegen.build import compile_plans
from benchc.codegen.points import MANIFEST, manifest_of
from benchc.folder_writer import LOCK
from benchc.manifest import (
    NOT_A_MANIFEST,
    FileHash,
    Manifest,
    ManifestPlan,
    Published,
    manifest_schema,
    plan_properties,
)
from benchc.pipeline import plan_spec
from benchc.runner.manifest import load_manifest

from helpers import REPO, SPECS

# every reference spec, compiled as compile writes it: cpu under --smoke and in full, h100, gaudi2
VARIANTS = (("cpu", True), ("cpu", False), ("h100", False), ("gaudi2", False))
SPEC_FILES = sorted(SPECS.glob("*.bench"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> list[tuple[object, Path]]:
    """(plan, build point folder) of every reference spec and variant, with job.sbatch."""
    out = tmp_path_factory.mktemp("manifests")
    points = []
    for spec in SPEC_FILES:
        for target, smoke in VARIANTS:
            plans = plan_spec(spec, [target], smoke=smoke).plans
            points += [(p.plan, p.path) for p in compile_plans(plans, out / spec.stem, sbatch=True)]
    return points


def test_every_reference_spec_compiles_to_manifests(built):
    assert len(SPEC_FILES) >= 5 and len(built) >= 40
    assert {path.parts[-2] for _, path in built} == {"cpu", "h100", "gaudi2"}


def test_every_manifest_loads_and_reads_back_as_the_record_and_the_json_written(built):
    for plan, path in built:
        text = (path / MANIFEST).read_text()
        written = json.loads(text)
        manifest = Manifest.from_json(written)
        assert isinstance(manifest, Manifest), (path, manifest)
        assert manifest.to_json() == written and manifest.text() == text, path
        made = manifest_of(plan, {name: (path / name).read_text() for name in _point_files(path)})
        assert made.text() == text and typed(made) == typed(manifest), path  # what codegen made
        assert load_manifest(path / MANIFEST) == manifest


def typed(manifest: Manifest) -> dict:
    """Every field of the record but the raw plan (a made one holds tuples where JSON has lists)."""
    fields = {f.name: getattr(manifest, f.name) for f in dataclasses.fields(manifest) if f.name != "plan"}
    plan = manifest.plan
    return {**fields, **{f.name: getattr(plan, f.name) for f in dataclasses.fields(plan) if f.name != "raw"}}


def _point_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.is_file() and p.name not in (MANIFEST, LOCK))


def test_the_record_holds_the_plan_fields_the_commands_read(built):
    for plan, path in built:
        m = load_manifest(path / MANIFEST)
        assert (m.experiment, m.target, m.point, m.smoke) == (
            plan.experiment, plan.target.name, plan.point, plan.smoke)  # fmt: skip
        assert (m.spec_path, m.spec_sha256) == (plan.spec.path, plan.spec.sha256)
        assert m.spec_files == tuple(FileHash(p, h) for p, h in plan.spec.files)
        p = m.plan
        assert p.raw == written_plan(path) and p.raw["experiment"] == plan.experiment
        assert (p.family, p.nodes, p.world_size) == (plan.target.family, plan.cluster.nodes,
                                                     plan.cluster.world_size)  # fmt: skip
        assert (p.repeat, p.timeout_s, p.metric) == (plan.measure.repeat, plan.measure.timeout_s,
                                                     plan.measure.metric)  # fmt: skip
        assert p.point_values == dict(plan.point_values) and p.slurm_time == plan.slurm.time
        assert p.description == plan.description
        assert [r.label for r in p.references] == [r.label for r in plan.references]
        assert [(r.label, r.value, r.unit, r.target, r.source, r.where) for r in p.declared_references] == [
            (r.label, r.value, r.unit, r.target, r.source, r.where) for r in plan.declared_references
        ]
        assert p.prices == p.raw["prices"] and p.roofline == p.raw["roofline"]
        work = plan.workload
        sequences = getattr(work, "global_batch", None) or getattr(work, "batch", None)
        tokens = getattr(work, "seq_len", None) or getattr(work, "output_tokens", None) or 1
        assert p.items_per_step == sequences * tokens


def written_plan(path: Path) -> dict:
    return json.loads((path / MANIFEST).read_text())["plan"]


def test_the_record_is_frozen(built):
    manifest = load_manifest(built[0][1] / MANIFEST)
    with pytest.raises(dataclasses.FrozenInstanceError):
        manifest.target = "h100"
    with pytest.raises(dataclasses.FrozenInstanceError):
        manifest.plan.repeat = 5


# ---------------------------------------------------------------- today's messages


@pytest.fixture(scope="module")
def manifest(built) -> dict:
    """A written manifest with references (sd3.bench on gaudi2)."""
    path = next(path for plan, path in built if plan.target.name == "gaudi2" and plan.references)
    return json.loads((path / MANIFEST).read_text())


def _schema_required(node: dict, path: tuple = ()) -> set[tuple]:
    """Every required path of the schema (an array's items as index 0)."""
    found = {(*path, key) for key in node.get("required", [])}
    for key, child in node.get("properties", {}).items():
        found |= _schema_required(child, (*path, key))
    if isinstance(node.get("items"), dict):
        found |= _schema_required(node["items"], (*path, 0))
    return found


MISSING = {
    ("manifest_version",): NOT_A_MANIFEST,
    ("experiment",): NOT_A_MANIFEST,
    ("target",): "top level: 'target' is a required property",
    ("point",): "top level: 'point' is a required property",
    ("smoke",): "top level: 'smoke' is a required property",
    ("spec",): "top level: 'spec' is a required property",
    ("plan",): "top level: 'plan' is a required property",
    ("files",): "top level: 'files' is a required property",
    ("spec", "path"): "spec: 'path' is a required property",
    ("spec", "sha256"): "spec: 'sha256' is a required property",
    ("files", 0, "path"): "files/0: 'path' is a required property",
    ("plan", "cluster"): "plan: 'cluster' is a required property",
    ("plan", "measure"): "plan: 'measure' is a required property",
    ("plan", "target"): "plan: 'target' is a required property",
    ("plan", "workload"): "plan: 'workload' is a required property",
    ("plan", "cluster", "nodes"): "plan/cluster: 'nodes' is a required property",
    ("plan", "cluster", "world_size"): "plan/cluster: 'world_size' is a required property",
    ("plan", "measure", "repeat"): "plan/measure: 'repeat' is a required property",
    ("plan", "measure", "timeout_s"): "plan/measure: 'timeout_s' is a required property",
    ("plan", "target", "family"): "plan/target: 'family' is a required property",
}


def test_the_required_fields_tested_are_the_schemas():
    prices = {("plan", "prices", "currency"), ("plan", "prices", "per_device_hour")}  # only where given
    assert _schema_required(manifest_schema()) - prices == set(MISSING)


def _without(data: dict, path: tuple) -> dict:
    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return data


@pytest.mark.parametrize("path", MISSING, ids=["/".join(map(str, p)) for p in MISSING])
def test_a_manifest_missing_a_required_field_gives_todays_message(manifest, path):
    assert Manifest.from_json(_without(manifest, path)) == MISSING[path]


def _with(data: dict, path: tuple, value) -> dict:
    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


WRONG = [
    (("manifest_version",), 2, NOT_A_MANIFEST),
    (("experiment",), 5, "experiment: 5 is not of type 'string'"),
    (("experiment",), "", "experiment: '' should be non-empty"),
    (("experiment",), "../../etc", "experiment '../../etc' is not a name benchc writes"),
    (("target",), "a\nb", "target 'a\\nb' is not a name benchc writes"),
    (("point",), ["x"], "point: ['x'] is not of type 'string'"),
    (("smoke",), "yes", "smoke: 'yes' is not of type 'boolean'"),
    (("spec",), 5, "spec: 5 is not of type 'object'"),
    (("spec", "path"), None, "spec/path: None is not of type 'string'"),
    (("spec", "sha256"), 1, "spec/sha256: 1 is not of type 'string'"),
    (("files",), {}, "files: {} is not of type 'array'"),
    (("files", 0), "bench.py", "files/0: 'bench.py' is not of type 'object'"),
    (("files", 0, "path"), 7, "files/0/path: 7 is not of type 'string'"),
    (("plan",), [], "plan: [] is not of type 'object'"),
    (("plan", "cluster", "nodes"), "two", "plan/cluster/nodes: 'two' is not of type 'integer'"),
    (("plan", "cluster", "world_size"), 0, "plan/cluster/world_size: 0 is less than the minimum of 1"),
    (("plan", "measure"), ["x"], "plan/measure: ['x'] is not of type 'object'"),
    (("plan", "measure", "repeat"), 10**18,
     "plan/measure/repeat: 1000000000000000000 is greater than the maximum of 100"),
    (("plan", "measure", "timeout_s"), 0,
     "plan/measure/timeout_s: 0 is less than or equal to the minimum of 0"),
    (("plan", "measure", "metric"), 1, "plan/measure/metric: 1 is not of type 'string'"),
    (("plan", "target", "family"), "tpu", "plan/target/family: 'tpu' is not one of ['cpu', 'cuda', 'hpu']"),
    (("plan", "workload"), 1, "plan/workload: 1 is not of type 'object'"),
    (("plan", "workload", "global_batch"), "x",
     "plan/workload/global_batch: 'x' is not of type 'integer', 'null'"),
    (("plan", "point_values"), [], "plan/point_values: [] is not of type 'object'"),
    (("plan", "slurm", "time"), 30, "plan/slurm/time: 30 is not of type 'string', 'null'"),
    (("plan", "references"), {}, "plan/references: {} is not of type 'array'"),
    (("plan", "references", 0, "value"), "fast", "plan/references/0/value: 'fast' is not of type 'number'"),
    (("plan", "declared_references", 0, "where"), ["train.batch"],
     "plan/declared_references/0/where: ['train.batch'] is not of type 'object', 'null'"),
    (("plan", "prices"), [], "plan/prices: [] is not of type 'object', 'null'"),
    (("plan", "roofline"), "x", "plan/roofline: 'x' is not of type 'object', 'null'"),
    (("plan", "roofline", "lower_is_better"), "no",
     "plan/roofline/lower_is_better: 'no' is not of type 'boolean'"),
]  # fmt: skip


@pytest.mark.parametrize(
    "path, value, message", WRONG, ids=[f"{'/'.join(map(str, p))}={v!r}"[:50] for p, v, _ in WRONG]
)
def test_a_manifest_with_a_value_of_the_wrong_type_gives_todays_message(manifest, path, value, message):
    assert Manifest.from_json(_with(manifest, path, value)) == message


@pytest.mark.parametrize("data", [None, [], "x", 5, {}, {"manifest_version": 1}])
def test_what_is_no_manifest_at_all_says_so(data):
    assert Manifest.from_json(data) == NOT_A_MANIFEST


def test_two_problems_name_the_first_and_count_the_others(manifest):
    data = _with(_with(manifest, ("smoke",), "yes"), ("plan", "measure", "repeat"), 0)
    assert Manifest.from_json(data) == "plan/measure/repeat: 0 is less than the minimum of 1 (and 1 more)"


# ---------------------------------------------------------------- the schema and the records agree

# The fields no command relies on: read for what they are, and not in the schema (an older
# benchc's manifest may hold anything there). A field added here is a deliberate choice.
UNCHECKED = {"spec/files", "spec/files/[]/path", "spec/files/[]/sha256", "files/[]/sha256", "compiler", "run",
             "checked_with", "plan/description"}  # fmt: skip


def record_paths(cls, prefix: tuple = (), checked: bool = True) -> dict[str, tuple[bool, bool]]:
    """Every JSON path a record's fields read ('[]': each item of a list) -> (whether the schema
    is to check it, whether it is a leaf: a value, not a record whose fields have paths too)."""
    found = {}
    for f in dataclasses.fields(cls):
        if "at" not in f.metadata:
            continue  # ManifestPlan.raw: the whole plan, passed through
        path = (*prefix, *f.metadata["at"])
        here, record = checked and f.metadata["checked"], f.metadata["record"]
        found["/".join(path)] = (here, record is None)
        if record is not None:
            found |= record_paths(record, (*path, "[]") if f.metadata["many"] else path, here)
    return found


def schema_paths(node: dict, prefix: tuple = ()) -> set[str]:
    """Every property path of a JSON Schema ('[]': an array's items)."""
    found = set()
    for key, child in node.get("properties", {}).items():
        found.add("/".join((*prefix, key)))
        found |= schema_paths(child, (*prefix, key))
    if isinstance(node.get("items"), dict):
        found |= schema_paths(node["items"], (*prefix, "[]"))
    return found


def disagreements(schema: dict, cls) -> list[str]:
    """What one of the schema and the record has and the other has not; [] where they agree."""
    fields, properties = record_paths(cls), schema_paths(schema)
    checked = {path for path, (check, _) in fields.items() if check}
    leaves = {path for path, (check, leaf) in fields.items() if check and leaf}
    problems = [f"field {p} is not in the schema" for p in sorted(checked - properties)]
    unchecked = set(fields) - checked
    problems += [f"unchecked field {p} is in the schema" for p in sorted(unchecked & properties)]

    def covered(prop: str) -> bool:  # a field's, one holding a field's, or inside a leaf (a dict)
        return any(prop == p or p.startswith(prop + "/") for p in checked) or any(
            prop.startswith(p + "/") for p in leaves
        )

    problems += [f"schema property {p} is read by no field" for p in sorted(properties) if not covered(p)]
    return problems


def test_the_schema_and_the_records_fields_agree():
    assert disagreements(manifest_schema(), Manifest) == []
    assert {path for path, (check, _) in record_paths(Manifest).items() if not check} == UNCHECKED


def test_a_field_or_a_property_added_to_one_alone_is_found():
    schema = copy.deepcopy(manifest_schema())
    schema["properties"]["plan"]["properties"]["cluster"]["properties"]["rack"] = {"type": "string"}
    assert disagreements(schema, Manifest) == ["schema property plan/cluster/rack is read by no field"]
    schema = copy.deepcopy(manifest_schema())
    del schema["properties"]["plan"]["properties"]["measure"]["properties"]["metric"]
    assert disagreements(schema, Manifest) == ["field plan/measure/metric is not in the schema"]


def test_the_stored_plans_schema_names_no_field_a_manifests_plan_lacks_and_requires_none():
    stored = plan_properties(complete=False)
    assert set(stored) <= set(plan_properties(complete=True))
    assert [name for name, node in stored.items() if node.get("required") and name != "prices"] == []


# ---------------------------------------------------------------- stored plans, tolerantly


def test_a_stored_plan_lacking_fields_reads_as_the_commands_defaults():
    for stored in (None, {}, [], "x"):
        plan = ManifestPlan.read(stored)
        assert (plan.raw, plan.family, plan.nodes, plan.world_size, plan.repeat, plan.timeout_s) == (
            {}, "cpu", 1, 1, 1, 3600.0)  # fmt: skip
        assert (plan.metric, plan.references, plan.prices, plan.roofline, plan.items_per_step) == (
            None, (), None, None, None)  # fmt: skip
    assert ManifestPlan.read({"cluster": {"nodes": 4}}).world_size == 4


def test_a_stored_plan_of_the_wrong_types_reads_without_a_traceback():
    odd = {"cluster": [], "measure": {"repeat": "3", "metric": 5}, "target": {"family": None},
           "references": [1, {"label": 2, "value": True, "where": []}], "prices": "USD",
           "workload": {"batch": True}, "description": {"x": 1}}  # fmt: skip
    plan = ManifestPlan.read(odd)
    assert (plan.nodes, plan.repeat, plan.metric, plan.family, plan.prices, plan.description) == (
        1, 1, None, "cpu", None, None)  # fmt: skip
    assert plan.references == (Published(None, None, None, None, None, None),)
    assert plan.items_per_step is None and plan.raw is odd


# ---------------------------------------------------------------- where the record sits


def _packages(path: Path) -> set[str]:
    """The benchc packages a module of compiler/<package>/ (or compiler/ itself) imports from."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            inside = path.parent.relative_to(REPO / "compiler").parts
            parts = [*inside[: len(inside) - (node.level - 1)], *(node.module or "").split(".")]
            found.add(parts[0])
    return found


def test_the_manifest_module_sits_below_codegen_runner_results_and_commands():
    assert not _packages(REPO / "compiler" / "manifest.py") & {"codegen", "runner", "results", "commands"}


def test_results_imports_nothing_from_runner():
    for module in sorted((REPO / "compiler" / "results").glob("*.py")):
        assert "runner" not in _packages(module), module
