"""benchc compile: build folders, determinism, manifests, format, golden programs, one core."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import subprocess
import sys

import pytest
from codegen_helpers import core_text, s1_files, spec_files, spec_points

from benchc.codegen.literals import literal, string_literal

from helpers import GOLDEN, REPO, heavy_modules_imported_by, run_cli

PROGRAMS = GOLDEN / "programs"
UPDATE = os.environ.get("BENCHC_UPDATE_GOLDEN") == "1"
REGENERATE = "after an intended change, regenerate: BENCHC_UPDATE_GOLDEN=1 pytest tests/test_codegen.py"


def tree_bytes(root) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_compile_s1_writes_two_points_for_three_targets_identically(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    result = run_cli("compile", "specs/sd3.bench", "-o", str(first), cwd=REPO)
    assert result.code == 0, result.err
    assert run_cli("compile", "specs/sd3.bench", "-o", str(second), cwd=REPO).code == 0
    files = tree_bytes(first)
    expected = {
        f"sd3_mmdit_train/{t}/{p}/{f}"
        for t in ("gaudi2", "h100", "a100")
        for p in ("batch-16", "batch-32")
        # 2 nodes: a Slurm job too; .benchc.lock, empty: what a running program holds (folder_writer.py)
        for f in ("bench.py", "job.sbatch", "launch.sh", "manifest.json", ".benchc.lock")
    }
    assert set(files) == expected
    assert files == tree_bytes(second)  # byte-identical
    # compiling again over an existing build replaces it in place, same bytes
    assert run_cli("compile", "specs/sd3.bench", "-o", str(first), cwd=REPO).code == 0
    assert tree_bytes(first) == files
    launcher = first / "sd3_mmdit_train/h100/batch-16/launch.sh"
    assert os.access(launcher, os.X_OK)


def test_manifest_is_versioned_and_hashes_every_file(tmp_path):
    assert run_cli("compile", "specs/sd3.bench", "-t", "gaudi2", "-o", str(tmp_path), cwd=REPO).code == 0
    point = tmp_path / "sd3_mmdit_train/gaudi2/batch-32"
    manifest = json.loads((point / "manifest.json").read_text())
    assert manifest["manifest_version"] == 1
    assert manifest["compiler"]["name"] == "benchc"
    spec = (REPO / "specs/sd3.bench").read_bytes()
    assert manifest["spec"]["sha256"] == hashlib.sha256(spec).hexdigest()
    assert [f["path"] for f in manifest["files"]] == ["bench.py", "job.sbatch", "launch.sh"]
    for entry in manifest["files"]:
        assert hashlib.sha256((point / entry["path"]).read_bytes()).hexdigest() == entry["sha256"]
    assert manifest["plan"]["workload"]["micro_batch"] == 32
    assert manifest["plan"]["target"]["name"] == "gaudi2"
    # 2 nodes x 8 cards on Gaudi: DeepSpeed's launcher on the first node, or the Slurm job
    assert manifest["run"]["launcher"] == "deepspeed" and manifest["run"]["nodes"] == 2
    assert manifest["run"]["launch"].startswith("on the first node only: HOSTFILE=")
    assert manifest["run"]["slurm"] == "sbatch job.sbatch"


def test_compile_of_a_workload_not_generated_yet_is_a_clear_error(tmp_path):
    result = run_cli("compile", "specs/sd3.bench", "--set", "parallel.tensor=2", "--set", "parallel.data=8",
                     "-o", str(tmp_path), cwd=REPO)  # fmt: skip
    assert result.code == 2
    assert "tensor parallel training" in result.err and "Traceback" not in result.err
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_deepspeed_fp16_on_the_cpu_is_refused_with_the_fix(tmp_path):
    result = run_cli("compile", "specs/beluga-train.bench", "--smoke", "--set", "parallel.sharding=zero3",
                     "-o", str(tmp_path), cwd=REPO)  # fmt: skip
    assert result.code == 2 and "has no fp16 on the CPU" in result.err
    assert "train.precision = bf16" in result.err


@pytest.mark.integration  # a fresh interpreter
def test_compile_never_imports_torch(tmp_path):
    for spec in ("sd3.bench", "beluga-train.bench", "beluga-infer.bench", "sd3-infer.bench"):
        assert heavy_modules_imported_by(["compile", f"specs/{spec}", "-o", str(tmp_path)]) == []


@pytest.mark.parametrize("target", ["gaudi2", "h100", "a100"])
def test_the_device_neutral_core_is_the_same_text_for_every_target(target):
    cpu = core_text(s1_files("cpu", smoke=True)["bench.py"])
    other = core_text(s1_files(target)["bench.py"])
    assert other == cpu
    assert "def train(" in cpu and "Rectified flow" in cpu
    # S4 shards with ZeRO-3 on Gaudi and FSDP2 elsewhere: compare each with the cpu's same kind
    sharding = "zero3" if target.startswith("gaudi") else "fsdp"
    same = [f"parallel.sharding={sharding}", "train.precision=bf16"]
    llama_cpu = core_text(spec_files("beluga-train.bench", "cpu", smoke=True, overrides=same)["bench.py"])
    assert core_text(spec_files("beluga-train.bench", target)["bench.py"]) == llama_cpu
    assert "AutoModelForCausalLM.from_config" in llama_cpu


def _ruff(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.integration  # ruff on each program
@pytest.mark.parametrize(
    "target, smoke, overrides",
    [
        ("cpu", True, []),
        ("gaudi2", False, []),
        ("gaudi2", False, ["train.compile=true", "train.grad_clip=1.0"]),
        ("h100", False, ["train.attention=xformers", "train.precision=fp16"]),
        ("a100", False, ["parallel.sharding=fsdp", "parallel.activation_checkpointing=true"]),
        ("llama:cpu", True, []),
        ("llama:gaudi2", False, []),
        ("llama:h100", False, ["train.attention=eager", "parallel.sharding=none"]),
        ("llama:gaudi2", False, ["parallel.sharding=zero3"]),
        ("generate:cpu", True, []),
        ("generate:gaudi2", False, []),
        ("generate:h100", False, ["infer.compile=true"]),
        ("pipeline:cpu", True, []),
        ("pipeline:gaudi2", False, []),
        ("pipeline:a100", False, ["infer.compile=true"]),
    ],
)
def test_generated_programs_are_formatted_and_lint_clean(tmp_path, target, smoke, overrides):
    if target.startswith("pipeline:"):
        files = spec_files("sd3-infer.bench", target.split(":")[1], smoke=smoke, overrides=overrides)
    elif target.startswith("generate:"):
        files = spec_files("beluga-infer.bench", target.split(":")[1], smoke=smoke, overrides=overrides)
    elif target.startswith("llama:"):
        files = spec_files("beluga-train.bench", target.split(":")[1], smoke=smoke, overrides=overrides)
    else:
        files = s1_files(target, smoke=smoke, overrides=overrides)
    (tmp_path / "bench.py").write_text(files["bench.py"])
    fmt = _ruff("format", "--isolated", "--check", "--diff", "bench.py", cwd=tmp_path)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    lint = _ruff(
        "check", "--isolated", "--select", "E,F,W,I,B", "--ignore", "E501", "bench.py", cwd=tmp_path
    )  # F821 (undefined name) and F401 (unused import) included
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.integration  # ruff on each program
def test_every_reference_spec_s_programs_are_formatted_and_lint_clean(tmp_path):
    """Every spec in specs/, on cpu (smoke), h100 and gaudi2: each point's program formatted as
    ruff formats it and lint clean (a model kind's templates are only ever seen through its specs)."""
    from helpers import SPECS

    names = []
    for spec in sorted(SPECS.glob("*.bench")):
        for target, smoke in (("cpu", True), ("h100", False), ("gaudi2", False)):
            for index, files in enumerate(spec_points(spec.name, target, smoke)):
                name = f"{spec.stem}-{target}-{index}.py"
                (tmp_path / name).write_text(files["bench.py"])
                names.append(name)
    assert len(names) >= 27
    fmt = _ruff("format", "--isolated", "--check", *names, cwd=tmp_path)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    lint = _ruff("check", "--isolated", "--select", "E,F,W,I,B", "--ignore", "E501", *names, cwd=tmp_path)
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.parametrize("name, target, smoke", [("gaudi2", "gaudi2", False), ("h100", "h100", False),
                                                 ("cpu-smoke", "cpu", True)])  # fmt: skip
def test_golden_s1_programs(name, target, smoke):
    files = s1_files(target, smoke=smoke)
    for file in ("bench.py", "launch.sh", "job.sbatch"):
        golden = PROGRAMS / name / file
        if UPDATE:
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(files[file])
        assert files[file] == golden.read_text(), f"{name}/{file} differs from its golden file; {REGENERATE}"


# Golden programs of the other scenarios, kept small for review: "core once, adapters and launchers
# per target". In each folder, core.py holds the device-neutral core once; each variant's
# bench.py has that section replaced by a one-line marker naming its core file, beside the
# launcher files render returns (manifest.json aside: it names the spec by its absolute path).
# A variant whose core differs (S4's ZeRO-3 on Gaudi, S5's attention on Gaudi) gets its own
# core.<variant>.py. Variants: (folder, spec, target, smoke, overrides).
CORE_MARKER = "# ==== benchc: device-neutral core: see ../{} ===="
ACCELERATE_BF16 = ["runtime=accelerate", "train.precision=bf16"]  # accelerate has no fp16 on the CPU
GOLDEN_SETS = {
    "s1-sd3-train": [  # the torch runtime's S1 programs are the folders gaudi2, h100 and cpu-smoke
        ("cpu-smoke-accelerate", "sd3.bench", "cpu", True, ["runtime=accelerate"]),
        ("h100-accelerate", "sd3.bench", "h100", False, ["runtime=accelerate"]),
        ("gaudi2-accelerate", "sd3.bench", "gaudi2", False, ["runtime=accelerate"]),
    ],
    "s3-sd3-infer": [
        ("cpu-smoke", "sd3-infer.bench", "cpu", True, []),
        ("h100", "sd3-infer.bench", "h100", False, []),
        ("gaudi2", "sd3-infer.bench", "gaudi2", False, []),
    ],
    "s4-beluga-train": [
        ("cpu-smoke", "beluga-train.bench", "cpu", True, []),
        ("h100", "beluga-train.bench", "h100", False, []),
        ("gaudi2", "beluga-train.bench", "gaudi2", False, []),
        ("cpu-smoke-accelerate", "beluga-train.bench", "cpu", True, ACCELERATE_BF16),
        ("h100-accelerate", "beluga-train.bench", "h100", False, ["runtime=accelerate"]),
        ("gaudi2-accelerate", "beluga-train.bench", "gaudi2", False, ["runtime=accelerate"]),
    ],
    "s5-beluga-infer": [
        ("cpu-smoke", "beluga-infer.bench", "cpu", True, []),
        ("h100", "beluga-infer.bench", "h100", False, []),
        ("gaudi2", "beluga-infer.bench", "gaudi2", False, []),
    ],
}


def golden_set_files(variants) -> dict:
    """The golden files of one folder: {relative path: text}, each core stored once."""
    files, cores = {}, {}  # cores: text -> file name, the first variant's core being core.py
    for variant, spec, target, smoke, overrides in variants:
        rendered = spec_files(spec, target, smoke=smoke, overrides=overrides)
        program = rendered.pop("bench.py")
        core = core_text(program)
        body = core.rstrip("\n") + "\n"
        name = cores.setdefault(body, "core.py" if not cores else f"core.{variant}.py")
        files[name] = body
        marker = CORE_MARKER.format(name) + core[len(body) - 1 :]  # the blank lines after the core
        files[f"{variant}/bench.py"] = program.replace(core, marker, 1)
        rendered.pop("manifest.json", None)
        files.update({f"{variant}/{file}": text for file, text in rendered.items()})
    return files


@pytest.mark.parametrize("folder", sorted(GOLDEN_SETS))
def test_golden_programs_core_once_and_per_target(folder):
    root = PROGRAMS / folder
    expected = golden_set_files(GOLDEN_SETS[folder])
    stored = {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}
    if UPDATE:
        for path in set(stored) - set(expected):
            (root / path).unlink()  # a file render no longer returns, or a core no longer needed
        for path, text in expected.items():
            if stored.get(path) != text:
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_text(text)
        stored = dict(expected)
    problems = [f"{folder}/{p}: no golden file" for p in sorted(set(expected) - set(stored))]
    problems += [
        f"{folder}/{p}: golden file no longer generated" for p in sorted(set(stored) - set(expected))
    ]
    for path in sorted(set(expected) & set(stored)):
        if expected[path] != stored[path]:
            old, new = stored[path].splitlines(), expected[path].splitlines()
            diff = difflib.unified_diff(old, new, "golden", "generated", n=1, lineterm="")
            problems.append(f"{folder}/{path} differs from its golden file:\n" + "\n".join(list(diff)[:40]))
    assert not problems, "\n".join(problems) + f"\n{REGENERATE}"


@pytest.mark.parametrize(
    "value",
    ["plain", 'with "double" quotes', "with 'single' quotes", "both ' and \"", "tab\tnew\nline",
     '"""', "{{ x }} {% if %}", "__import__('os').system('x')", "\\", "é ü ∑ 🙂", "\x00\x1b"],
)  # fmt: skip
def test_string_literals_round_trip(value):
    import ast

    assert ast.literal_eval(string_literal(value)) == value


def test_literals_of_nested_values_round_trip_and_refuse_other_types():
    import ast

    value = {"a": [1, 2.5, None, True], "b": {"c": "x", "d": []}, "e": -3, "f": 1e-05}
    assert ast.literal_eval(literal(value)) == value
    with pytest.raises(TypeError):
        literal({"a": object()})
    with pytest.raises(TypeError):
        literal(float("nan"))
