"""docs/language.md documents every setting, preset and target that benchc accepts."""

from __future__ import annotations

import re

from benchc.catalog.presets import PRESETS
from benchc.catalog.targets import TARGETS
from benchc.validate.schema import schema

from helpers import REPO

DOC = (REPO / "docs" / "language.md").read_text()
CODE_SPANS = re.findall(r"`([^`\n]+)`", DOC)


def documented(word: str) -> bool:
    """The word appears as a whole word inside some `code span` of the page."""
    pattern = re.compile(rf"(?<![\w-]){re.escape(word)}(?![\w-])")
    return any(pattern.search(span) for span in CODE_SPANS)


def _keys(node) -> set[str]:
    found = set()
    if isinstance(node, dict):
        for key, value in (node.get("properties") or {}).items():
            found.add(key)
            found |= _keys(value)
        for value in node.values():
            if isinstance(value, (dict, list)):
                found |= _keys(value)
    elif isinstance(node, list):
        for item in node:
            found |= _keys(item)
    return found


def test_every_schema_key_is_documented():
    keys = _keys(schema()) - {"fn", "args"}  # the internal form of a call
    missing = sorted(k for k in keys if not documented(k))
    assert not missing, f"undocumented settings: {missing}"


def test_every_enumerated_value_is_documented():
    def enums(node):
        if isinstance(node, dict):
            yield from node.get("enum", [])
            for value in node.values():
                yield from enums(value)
        elif isinstance(node, list):
            for item in node:
                yield from enums(item)

    missing = sorted({v for v in enums(schema()) if not documented(v)})
    assert not missing, f"undocumented values: {missing}"


def test_presets_and_targets_are_documented():
    for presets in PRESETS.values():
        for name in presets:
            assert documented(f'"{name}"'), name
    for name in TARGETS:
        assert documented(name), name


def test_the_commands_of_clusters_md_are_the_cli_s():
    """Every `benchc ...` line in docs/clusters.md's examples parses with benchc's own parser
    (tests/test_slurm.py runs them against a real Slurm)."""
    import shlex

    from benchc.cli import _parser

    page = (REPO / "docs" / "clusters.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", page, re.S)
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    commands = [shlex.split(line)[1:] for line in lines if line.startswith("benchc ")]
    assert {c[0] for c in commands} >= {"submit", "status", "cancel", "report", "compile", "ingest"}
    for argv in commands:
        argv = [a.replace("<job id>", "1") for a in argv]
        _parser().parse_args(argv)  # exits 2 on an option benchc does not have


def test_ci_runs_exactly_the_readme_test_command_with_the_tested_versions():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    command = next(line for line in ci.splitlines() if "pytest" in line)
    assert command in readme
    assert "-c constraints.txt" in command
    main_job = next(line for line in readme.splitlines() if "benchc run specs/" in line)
    assert "-c constraints.txt" in main_job
    pinned = dict(
        line.split("==") for line in (REPO / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )  # fmt: skip
    for name in ("torch", "diffusers", "transformers", "accelerate", "optimum-habana", "deepspeed"):
        assert name in pinned, name


def test_manifests_name_the_tested_versions_of_constraints_txt(tmp_path):
    import json

    from benchc.catalog.versions import TESTED

    pinned = dict(
        line.split("==") for line in (REPO / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )  # fmt: skip
    assert {name: pinned[name] for name in TESTED} == TESTED
    from helpers import run_cli

    assert run_cli("compile", "specs/sd3.bench", "-t", "gaudi2", "-o", str(tmp_path), cwd=REPO).code == 0
    manifest = json.loads((tmp_path / "sd3_mmdit_train/gaudi2/batch-16/manifest.json").read_text())
    assert manifest["checked_with"]["libraries"] == TESTED
    assert "not run on Gaudi" in manifest["checked_with"]["how"]


def test_nothing_cites_a_file_the_repository_does_not_have():
    for path in [*REPO.glob("*.md"), *(REPO / "docs").glob("*.md"), *(REPO / "compiler").rglob("*.py")]:
        assert "DESIGN.md" not in path.read_text(), path


def test_the_compiler_needs_only_what_the_readme_says():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0].split("=")[0] for d in project["dependencies"]] == [
        "lark",
        "jinja2",
        "jsonschema",
    ]
    readme = (REPO / "README.md").read_text()
    assert "The compiler needs only `lark`, `jinja2` and `jsonschema`" in readme


def test_the_wheel_lists_every_package_of_the_compiler():
    """pyproject.toml names the wheel's packages one by one (the folders map into benchc):
    a new sub-package left off the list installs a benchc that fails at import."""
    import tomllib

    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {
        ".".join(("benchc", *init.parent.relative_to(REPO / "compiler").parts))
        for init in (REPO / "compiler").rglob("__init__.py")
    }
    assert folders <= set(setuptools["packages"]), sorted(folders - set(setuptools["packages"]))
