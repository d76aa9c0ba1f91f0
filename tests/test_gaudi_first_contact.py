"""Gaudi programs on first contact (issue 33's Gaudi items), checked without a card: the
execution mode the plan chose is the one every program runs with, whatever launch.sh or the
user's environment says; S5's generate options per tier are optimum-habana's and never ask
for HPU graphs outside lazy mode; the timer waits for the card only after the window; FSDP on
Gaudi passes `check` under tuned; benchmarks/gaudi_check.sh's dry run. The programs are the
real generated ones; their Gaudi functions are run here with the plan they carry (nothing of
habana_frameworks is imported or faked: only functions that read the plan and the
environment are run)."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import jsonschema
import pytest
from codegen_helpers import plan_literal, spec_files
from system_tools import Unavailable, ensure

from helpers import REPO, SPECS, run_cli

GAUDI = ("gaudi2", "gaudi3")
TIERS = ("plain", "tuned")
SPEC_FILES = sorted(p.name for p in SPECS.glob("*.bench"))
MODE = {"lazy": "1", "eager": "0"}
OPTIMUM = Path(next(iter(importlib.util.find_spec("optimum").submodule_search_locations)))


def gaudi_files(spec: str, target: str, tier: str, *overrides: str) -> dict:
    return spec_files(spec, target, overrides=[f"optimize={tier}", *overrides])


def header_mode(program: str) -> str:
    """The value bench.py gives PT_HPU_LAZY_MODE before its imports (os.environ.setdefault)."""
    for node in ast.parse(program).body:
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call) and ast.unparse(call.func) == "os.environ.setdefault":
            name, value = (ast.literal_eval(arg) for arg in call.args)
            if name == "PT_HPU_LAZY_MODE":
                return value
    raise AssertionError("bench.py sets no PT_HPU_LAZY_MODE before its imports")


def gaudi_adapter(program: str, environ: dict) -> types.SimpleNamespace:
    """The program's PLAN, its module-level Gaudi functions and its Device class, defined in a
    namespace whose `os.environ` is `environ` (the class is defined, not instantiated: its
    methods that touch the card are never called here)."""
    tree = ast.parse(program)
    keep = [
        node
        for node in tree.body
        if (
            isinstance(node, ast.FunctionDef | ast.ClassDef)
            and node.name in ("habana_environment", "set_habana_environment", "Device")
        )
        or (isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PLAN")
    ]
    namespace = {"os": types.SimpleNamespace(environ=environ), "contextlib": contextlib}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "bench.py", "exec"), namespace)  # noqa: S102
    return types.SimpleNamespace(**{k: v for k, v in namespace.items() if not k.startswith("__")})


def method(program: str, name: str) -> ast.FunctionDef:
    device = next(n for n in ast.parse(program).body if isinstance(n, ast.ClassDef) and n.name == "Device")
    return next(n for n in device.body if isinstance(n, ast.FunctionDef) and n.name == name)


def calls(function: ast.FunctionDef) -> list[str]:
    return [ast.unparse(node.func) for node in ast.walk(function) if isinstance(node, ast.Call)]


def habana_variables(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(("PT_HPU", "HABANA", "HCCL"))}


# ---- one execution mode: the plan's -------------------------------------------------------


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> Path:
    """Stand-ins for the commands a Gaudi launch.sh starts (python, mpirun): each writes the
    environment it was started with, as JSON, to $STUB_OUT, and exits 0."""
    folder = tmp_path_factory.mktemp("stubs")
    dump = 'import json, os; json.dump(dict(os.environ), open(os.environ["STUB_OUT"], "w"))'
    record = f"#!/usr/bin/env bash\nexec {sys.executable} -c '{dump}'\n"
    for name in ("python-stub", "mpirun"):
        (folder / name).write_text(record)
        (folder / name).chmod(0o755)
    return folder


def launched_environment(files: dict, folder: Path, stubs: Path, extra: dict) -> dict:
    """Run the point's launch.sh for real, its command replaced by a stub: the environment the
    program would start with."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    plan = json.loads(files["manifest.json"])["plan"]
    hostfile = folder / "hostfile"
    hostfile.write_text("".join(f"node{i} slots=8\n" for i in range(plan["cluster"]["nodes"])))
    clean = {k: v for k, v in os.environ.items() if k not in habana_variables(os.environ)}
    env = {**clean, "PATH": f"{stubs}:{os.environ['PATH']}", "PYTHON": str(stubs / "python-stub"),
           "STUB_OUT": str(folder / "env.json"), "HOSTFILE": str(hostfile), **extra}  # fmt: skip
    proc = subprocess.run(
        ["bash", "launch.sh"], cwd=folder, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads((folder / "env.json").read_text())


@pytest.mark.integration
@pytest.mark.parametrize("target", GAUDI)
@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("spec", SPEC_FILES)
def test_every_gaudi_program_runs_in_the_mode_its_plan_chose_whatever_launch_sh_exports(
    tmp_path, stubs, spec, tier, target
):
    """launch.sh run for real: it adds no Habana variable to the command's environment (one
    place decides them: bench.py, from its plan); bench.py's own value then makes the mode the
    plan's, and its metrics read that value back. A conflicting PT_HPU_LAZY_MODE of the user's
    reaches the program unchanged and is refused there, never silently run."""
    files = gaudi_files(spec, target, tier)
    program, plan = files["bench.py"], plan_literal(files["bench.py"])
    manifest = json.loads(files["manifest.json"])["plan"]["tuning"]
    assert manifest["hpu_mode"] == plan["optimize"]["knobs"]["hpu_mode"]  # the manifest says what runs
    expected = MODE[plan["optimize"]["knobs"]["hpu_mode"]]

    seen = launched_environment(files, tmp_path / "clean", stubs, {})
    assert habana_variables(seen) == {}, "launch.sh set a Habana variable"
    environ = dict(seen)
    environ.setdefault("PT_HPU_LAZY_MODE", header_mode(program))  # the top of bench.py
    adapter = gaudi_adapter(program, environ)
    adapter.set_habana_environment()
    assert environ["PT_HPU_LAZY_MODE"] == expected
    recorded = adapter.Device.numerics(None)
    assert recorded["habana_environment"]["PT_HPU_LAZY_MODE"] == expected  # read back, not copied
    schema = json.loads((REPO / "compiler/schemas/metrics.schema.json").read_text())
    jsonschema.validate(recorded, schema["properties"]["numerics"])

    other = {"1": "0", "0": "1"}[expected]
    seen = launched_environment(files, tmp_path / "user", stubs, {"PT_HPU_LAZY_MODE": other})
    assert seen["PT_HPU_LAZY_MODE"] == other  # passed through: launch.sh overrides nothing
    environ = dict(seen)
    environ.setdefault("PT_HPU_LAZY_MODE", header_mode(program))
    with pytest.raises(RuntimeError, match=f"PT_HPU_LAZY_MODE={other} is set in the environment"):
        gaudi_adapter(program, environ).set_habana_environment()


@pytest.mark.parametrize("target", GAUDI)
@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("spec", SPEC_FILES)
def test_launch_sh_never_sets_a_habana_variable_and_bench_py_sets_the_plans_mode(spec, tier, target):
    """The same, read from the files (fast): no export of any Habana variable in launch.sh, and
    bench.py's value before its imports is the plan's mode."""
    files = gaudi_files(spec, target, tier)
    assert not re.search(r"\b(PT_HPU\w*|HABANA\w*|HCCL\w*)=", files["launch.sh"])
    plan = plan_literal(files["bench.py"])
    assert header_mode(files["bench.py"]) == MODE[plan["optimize"]["knobs"]["hpu_mode"]]
    adapter = gaudi_adapter(files["bench.py"], {})
    assert adapter.habana_environment()["PT_HPU_LAZY_MODE"] == header_mode(files["bench.py"])


# ---- S5's generate on Gaudi --------------------------------------------------------------


def generate_options(program: str) -> tuple[dict, dict]:
    """Device.generate_options and the Habana variables, evaluated with the program's plan."""
    adapter = gaudi_adapter(program, {})
    return adapter.Device.generate_options(None, adapter.PLAN["infer"]), adapter.habana_environment()


def optimum_habana_generate_names() -> set[str]:
    """What optimum-habana's generate takes: its parameters and GaudiGenerationConfig's fields."""
    from static_checks import _source_signature

    signature = _source_signature(
        "optimum.habana.transformers.generation.utils.GaudiGenerationMixin.generate"
    )
    config = (OPTIMUM / "habana/transformers/generation/configuration_utils.py").read_text()
    return set(signature.parameters) | set(re.findall(r"self\.(\w+) = kwargs\.get", config))


@pytest.mark.parametrize("target", GAUDI)
def test_s5_generate_options_per_tier_are_optimum_habanas(target):
    """Plain: optimum-habana's generate as shipped (its default bucket_size -1: static shapes
    padded to the full length at once). Tuned: the decode options of optimum-habana's Llama
    text-generation recipes, with the plan's decode bucket. Both: lazy mode and HPU graphs
    together, exactly the tokens asked, FusedSDPA; lazy collectives for tensor parallel."""
    names = optimum_habana_generate_names()
    plain, plain_env = generate_options(gaudi_files("beluga-infer.bench", target, "plain")["bench.py"])
    tuned_program = gaudi_files("beluga-infer.bench", target, "tuned")["bench.py"]
    tuned, tuned_env = generate_options(tuned_program)
    shared = {"lazy_mode": True, "hpu_graphs": True, "static_shapes": True, "ignore_eos": True,
              "use_flash_attention": True, "flash_attention_causal_mask": True}  # fmt: skip
    assert plain == {**shared, "bucket_size": -1}
    bucket = plan_literal(tuned_program)["infer"]["decode_bucket"]
    assert bucket == 128
    assert tuned == {**shared, "bucket_size": bucket, "bucket_internal": True, "trim_logits": True,
                     "limit_hpu_graphs": True}  # fmt: skip
    assert set(plain) | set(tuned) <= names
    # optimum-habana's own rule for the tuned set: bucket_internal needs a bucket, no reuse_cache
    assert "reuse_cache" not in tuned and tuned["bucket_size"] > 0
    # the decode bucket is the plan's, whatever it is
    adapter = gaudi_adapter(tuned_program, {})
    adapter.PLAN["infer"]["decode_bucket"] = 256
    assert adapter.Device.generate_options(None, adapter.PLAN["infer"])["bucket_size"] == 256
    # tensor parallel 8 in lazy mode: collectives inside HPU graphs (both tiers); tuned's
    # limit_hpu_graphs + bucket_internal lets generate clear the graphs' inputs
    assert plain_env == {"PT_HPU_LAZY_MODE": "1", "PT_HPU_ENABLE_LAZY_COLLECTIVES": "true"}
    assert tuned_env == {**plain_env, "PT_HPUGRAPH_DISABLE_TENSOR_CACHE": "1"}


S5_VARIANTS = [(), ("infer.graphs=false",), ("infer.kv_cache=dynamic",),
               ("infer.kv_cache=dynamic", "infer.graphs=false"),
               ("parallel.tensor=1", "cluster.devices_per_node=1"), ("infer.attention=sdpa",)]  # fmt: skip


@pytest.mark.parametrize("target", GAUDI)
@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("overrides", S5_VARIANTS)
def test_s5_on_gaudi_never_passes_hpu_graphs_without_lazy_mode(target, tier, overrides):
    """optimum-habana's generate raises a ValueError for HPU graphs without lazy mode (its
    utils.py); the program asks for graphs only in lazy mode, and the lazy_mode it passes is
    the mode the program runs in (bench.py's PT_HPU_LAZY_MODE)."""
    rule = (OPTIMUM / "habana/transformers/generation/utils.py").read_text()
    assert "if hpu_graphs and not lazy_mode:" in rule and "HPU graphs require `lazy_mode`" in rule
    assert run_cli("check", "specs/beluga-infer.bench", "-t", target, "--set", f"optimize={tier}",
                   *[a for o in overrides for a in ("--set", o)], cwd=REPO).code == 0  # fmt: skip
    program = gaudi_files("beluga-infer.bench", target, tier, *overrides)["bench.py"]
    options, environment = generate_options(program)
    assert options["lazy_mode"] or not options["hpu_graphs"]
    assert options["lazy_mode"] == (header_mode(program) == "1") == (environment["PT_HPU_LAZY_MODE"] == "1")
    if "infer.graphs=false" not in overrides:
        assert options["hpu_graphs"] is True  # the spec's graphs are honoured, not dropped


@pytest.mark.parametrize("target", GAUDI)
def test_compile_with_graphs_in_gaudi_generation_is_refused_at_the_setting(target):
    """infer.compile runs eager mode, where optimum-habana's HPU graphs raise: check refuses the
    pair at infer.compile, and accepts either alone."""
    check = ("check", "specs/beluga-infer.bench", "-t", target)
    refused = run_cli(*check, "--set", "infer.compile=true", cwd=REPO)
    assert refused.code == 2 and "--set[1]:1:15" in refused.err and "HPU graphs need lazy mode" in refused.err
    alone = ["--set", "infer.compile=true", "--set", "infer.graphs=false"]
    assert run_cli(*check, *alone, cwd=REPO).code == 0


# ---- the timer ----------------------------------------------------------------------------


TIMED = [("sd3.bench", "tuned"), ("sd3.bench", "plain"), ("beluga-infer.bench", "tuned"),
         ("sd3-infer.bench", "plain")]  # fmt: skip


@pytest.mark.parametrize(("spec", "tier"), TIMED)
def test_the_gaudi_timer_waits_for_the_card_only_after_the_window(spec, tier):
    """A step's boundary flushes the lazy graph (mark_step, no wait) and records an HPU event;
    the one synchronisation is in durations(), after the window, which reads the events."""
    program = gaudi_files(spec, "gaudi2", tier)["bench.py"]
    mark = calls(method(program, "time_mark"))
    assert not [c for c in mark if c.endswith("synchronize")], mark
    assert mark == ["htcore.mark_step", "hthpu.Event", "event.record"]
    event = next(n for n in ast.walk(method(program, "time_mark")) if isinstance(n, ast.Call)
                 and ast.unparse(n.func) == "hthpu.Event")  # fmt: skip
    assert [(k.arg, ast.literal_eval(k.value)) for k in event.keywords] == [("enable_timing", True)]
    durations = calls(method(program, "durations"))
    assert [c for c in durations if c.endswith("synchronize")] == ["hthpu.synchronize"]
    assert "start.elapsed_time" in durations


# ---- FSDP on Gaudi -------------------------------------------------------------------------


@pytest.mark.parametrize("target", GAUDI)
def test_check_passes_fsdp_on_gaudi_under_tuned_without_train_compile(target):
    """Habana's FSDP runs in eager mode: tuned compiles each block with the HPU backend there,
    plain runs it eagerly; neither needs train.compile written, and neither runs lazy mode."""
    fsdp = ["--set", "parallel.sharding=fsdp"]
    for spec in ("beluga-train.bench", "sd3.bench"):
        for tier in TIERS:
            result = run_cli(
                "check", f"specs/{spec}", "-t", target, *fsdp, "--set", f"optimize={tier}", cwd=REPO
            )
            assert result.code == 0, result.err
            program = gaudi_files(spec, target, tier, "parallel.sharding=fsdp")["bench.py"]
            knobs = plan_literal(program)["optimize"]["knobs"]
            assert knobs["hpu_mode"] == "eager" and header_mode(program) == "0"
            assert knobs["compile"] == ("regional" if tier == "tuned" else "off")
            assert knobs["optimizer"] == "default"  # no FusedAdamW over FSDP2's sharded parameters
    # train.compile written still wins, in either direction
    off = gaudi_files("beluga-train.bench", target, "tuned", "parallel.sharding=fsdp", "train.compile=false")
    assert plan_literal(off["bench.py"])["optimize"]["knobs"]["compile"] == "off"
    assert header_mode(off["bench.py"]) == "0"


# ---- benchmarks/gaudi_check.sh ------------------------------------------------------------

SCRIPT = REPO / "benchmarks/gaudi_check.sh"


def gaudi_check(out: Path, *args: str, env: dict | None = None, timeout: int = 180):
    env = {**os.environ, "OUT": str(out), **(env or {})}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


@pytest.mark.integration
def test_the_device_checks_parse_and_are_shellcheck_clean():
    """gaudi_check.sh, gpu_check.sh and what they share (check_lib.sh), followed into the
    sourced file (-x), and every other script of benchmarks/."""
    try:
        ensure({"shellcheck": "shellcheck"})
    except Unavailable as exc:
        pytest.fail(f"shellcheck is required here: {exc}")
    scripts = sorted((REPO / "benchmarks").glob("*.sh"))
    assert {SCRIPT.name, "gpu_check.sh", "check_lib.sh"} <= {s.name for s in scripts}
    for script in scripts:
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0, script
    lint = subprocess.run(["shellcheck", "-x", "-S", "warning", *(str(s.relative_to(REPO)) for s in scripts)],
                          capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert lint.returncode == 0, lint.stdout


GAUDI_RUNS = {
    "training": ["s1_b16_tuned", "s1_b16_plain", "s1_b32_tuned", "s4"],
    "inference": ["s5_l40_tuned", "s3", "s5_l40_plain", "s5_l2_tuned", "s5_l10_tuned"],
}


@pytest.mark.integration
@pytest.mark.parametrize("target", GAUDI)
@pytest.mark.parametrize("part", GAUDI_RUNS)
def test_gaudi_check_dry_run_compiles_its_programs_and_fits_8_minutes(tmp_path, part, target):
    """Every program of the part compiled for one card of the target, each launcher parsed and
    its command printed; the budget summed as gpu_check.sh's; the plain and tuned programs
    carry the modes and decode options this issue fixed."""
    proc = gaudi_check(tmp_path, part, "--dry-run", env={"TARGET": target})
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["part"] == part and summary["mode"] == "dry-run" and summary["target"] == target
    runs = [row["run"] for row in summary["runs"]]
    assert runs == GAUDI_RUNS[part]
    assert all(row["status"] == "dry run: compiled, not run" for row in summary["runs"])
    assert proc.stdout.count("  starts: ") == len(runs)
    budget = summary["budget"]
    total = sum(budget["required_limits_s"]) + budget["kill_after_s"] * len(budget["required_limits_s"])
    assert total + budget["fixed_s"] == budget["planned_total_s"] <= budget["call_s"] == 480
    header = re.search(rf"^#   {part}: +15 \+ .*= (\d+) <= 480$", SCRIPT.read_text(), re.M)
    assert header and int(header.group(1)) == budget["planned_total_s"]
    for name in runs:
        (program,) = (tmp_path / "build" / name).glob(f"*/{target}/*/bench.py")
        plan = plan_literal(program.read_text())
        assert plan["target"] == target and plan["world_size"] == 1 and plan["smoke"] is False
        tier = plan["optimize"]["tier"]
        assert tier == ("plain" if name.endswith("_plain") else "tuned")
        mode = plan["optimize"]["knobs"]["hpu_mode"]
        if part == "training":
            assert mode == ("eager" if tier == "plain" else "lazy")
        else:  # HPU graphs: lazy mode in both tiers
            assert mode == "lazy"
        if name.startswith("s5_"):
            assert plan["optimize"]["knobs"]["hpu_decode"] == ("default" if tier == "plain" else "bucketed")
