"""`weights = "..."`: a local checkpoint checked before anything runs (issue 25, items 1-4).

Real checkpoints written by save_pretrained from tiny real models (tests/checkpoint_helpers.py):
each mistake is a located `check` error; a matching folder gives the plan its shape and
parameters, runs with its weights loaded (a marker value proves it), and a smoke run checks
the folder in the program before it runs the tiny model.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from checkpoint_helpers import MARKER, llama_checkpoint, mmdit_checkpoint, sd3_checkpoint
from program_helpers import compile_point, load_program, model_from_local_weights

from helpers import REPO, heavy_modules_imported_by, run_cli

LLAMA_SPEC = """experiment tiny_llama {{
  model llama {{ {model} }}
  infer {{ batch = 2; input_tokens = 8; output_tokens = 8; steps = 3; warmup = 1; precision = fp32 }}
  cluster {{ nodes = 1; devices_per_node = 1 }}
  targets = [cpu]
}}
"""
MMDIT_SPEC = """experiment tiny_mmdit {{
  model mmdit {{ {model} }}
  train {{ batch = 2; resolution = 128; steps = 4; warmup = 1; precision = fp32 }}
  cluster {{ nodes = 1; devices_per_node = 1 }}
  targets = [cpu]
}}
"""
SD3_SPEC = """experiment tiny_sd3 {{
  model sd3 {{ {model} }}
  infer {{ batch = 1; resolution = 128; denoising_steps = 2; steps = 3; warmup = 1; precision = fp32 }}
  cluster {{ nodes = 1; devices_per_node = 1 }}
  targets = [cpu]
}}
"""


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> Path:
    """One tiny Llama and one tiny MMDiT checkpoint, shared by the tests of this module."""
    root = tmp_path_factory.mktemp("checkpoints")
    llama_checkpoint(root / "llama")
    mmdit_checkpoint(root / "mmdit")
    return root


def benchc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchc", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def spec(folder: Path, text: str, model: str, name: str = "spec.bench") -> Path:
    path = folder / name
    path.write_text(text.format(model=model))
    return path


def plan_json(path: Path, *args: str, cwd: Path) -> dict:
    result = run_cli("plan", str(path), "--json", *args, cwd=cwd)
    assert result.code == 0, result.err
    return json.loads(result.out)["plans"][0]


def test_a_checkpoint_gives_the_shape_the_spec_leaves_and_the_parameters_are_the_folders(folders, tmp_path):
    """A relative path is read from the spec's folder (not the working folder, not the build
    point), written absolute into the plan; the shape and parameter count are the folder's."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copytree(folders / "llama", project / "weights" / "llama")
    path = spec(project, LLAMA_SPEC, 'weights = "weights/llama"')
    plan = plan_json(path, cwd=tmp_path)  # run from elsewhere: the path is the spec's
    assert plan["model"]["weights"] == str((project / "weights" / "llama").resolve())
    assert plan["checkpoint"] == plan["model"]["weights"]
    config = json.loads((folders / "llama" / "config.json").read_text())
    assert (plan["model"]["hidden"], plan["model"]["layers"], plan["model"]["kv_heads"]) == (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["num_key_value_heads"],
    )
    from transformers import LlamaForCausalLM

    real = LlamaForCausalLM.from_pretrained(folders / "llama")
    assert plan["cost"]["params"] == sum(p.numel() for p in real.parameters())


@pytest.mark.integration
def test_checking_a_checkpoint_imports_no_torch(folders, tmp_path, pipeline):
    """check, plan and compile read the folders (headers included) without torch or the model
    libraries, as every command before run does."""
    shutil.copytree(folders / "llama", tmp_path / "llama")
    shutil.copytree(folders / "mmdit", tmp_path / "mmdit")
    llama = spec(tmp_path, LLAMA_SPEC, 'weights = "llama"', "l.bench")
    mmdit = spec(tmp_path, MMDIT_SPEC, 'weights = "mmdit"', "m.bench")
    sd3 = spec(tmp_path, SD3_SPEC, f'weights = "{pipeline}"', "s.bench")
    out = str(tmp_path / "out")
    commands = [["check", str(llama), "--strict"], ["plan", str(mmdit)], ["compile", str(sd3), "-o", out]]
    assert heavy_modules_imported_by(*commands) == []


def test_a_checkpoint_in_a_sweep_and_an_included_file_is_read_from_that_files_folder(folders, tmp_path):
    (tmp_path / "common").mkdir()
    shutil.copytree(folders / "mmdit", tmp_path / "common" / "mmdit")
    (tmp_path / "common" / "model.bench").write_text('model mmdit { weights = "mmdit" }\n')
    main = tmp_path / "main.bench"
    main.write_text(
        'include "common/model.bench"\n'
        + MMDIT_SPEC.format(model="").replace("model mmdit {  }\n", "sweep train.batch = [2, 4]\n")
    )
    plans = json.loads(run_cli("plan", str(main), "--json", cwd=REPO).out)["plans"]
    assert [p["model"]["weights"] for p in plans] == [str(tmp_path / "common" / "mmdit")] * 2


def _error_at(result, line: int, column: int, *words: str) -> None:
    assert result.code == 2, result.out + result.err
    first = result.err.splitlines()[0]
    assert f":{line}:{column}: error" in first, result.err
    for word in words:
        assert word in result.err, result.err


MISTAKES = {  # what the folder is -> words the error must hold
    "missing": ("no such folder", "never downloads"),
    "hub-id": ("no such folder", "Hub id is not a path"),
    "plain-file": ("is a file, not a folder",),
    "empty": ("has no config.json",),
    "bin-only": ("no model.safetensors", "safetensors only"),
    "other-kind": ("SD3Transformer2DModel, not a Llama",),
    "pipeline-for-llama": ("is a pipeline folder", "save_pretrained wrote"),
    "shard-missing": ("lacks model-0000", "which model.safetensors.index.json names"),
    "tensors-unlike-config": ("do not match the model its config.json describes", "mlp.up_proj.weight"),
    "another-family": ("is for mistral, not a Llama", "write model causal_lm"),
    # sizes bounded as the spec's before any arithmetic (issue 34, M1): refused at once
    "huge-layers": (
        "num_hidden_layers = 20,000,000 is more than benchc plans for",
        "model.llama.layers is at most",
    ),
    "huge-vocab": (
        "vocab_size = 2,000,000,000 is more than benchc plans for",
        "model.llama.vocab is at most",
    ),
    # a head size the config cannot give: said as such, not as tensors unlike the config
    "indivisible-hidden": ("is not divisible by num_attention_heads", "it gives no head_dim"),
    "odd-head-dim": ("head_dim is 7, an odd number",),
}


def _make(kind: str, folders: Path, at: Path) -> str:
    """A folder (or name) that is wrong in the way `kind` says; the text to write as weights."""
    if kind == "missing":
        return "nowhere"
    if kind == "hub-id":
        return "meta-llama/Llama-2-7b-hf"
    if kind == "plain-file":
        (at / "weights.safetensors").write_bytes(b"")
        return "weights.safetensors"
    if kind == "empty":
        (at / "empty").mkdir()
        return "empty"
    if kind == "bin-only":
        shutil.copytree(folders / "llama", at / "bin")
        (at / "bin" / "model.safetensors").rename(at / "bin" / "pytorch_model.bin")
        return "bin"
    if kind == "other-kind":
        shutil.copytree(folders / "mmdit", at / "other")
        (at / "other" / "config.json").write_text(
            (at / "other" / "config.json").read_text()
        )  # a diffusers config, named for a llama
        return "other"
    if kind == "pipeline-for-llama":
        (at / "pipe").mkdir()
        (at / "pipe" / "model_index.json").write_text('{"_class_name": "StableDiffusion3Pipeline"}')
        return "pipe"
    if kind == "shard-missing":
        llama_checkpoint(at / "sharded")
        from transformers import LlamaForCausalLM

        LlamaForCausalLM.from_pretrained(at / "sharded").save_pretrained(
            at / "sharded", max_shard_size="50KB"
        )
        max(at.glob("sharded/model-*.safetensors")).unlink()
        return "sharded"
    if kind == "tensors-unlike-config":
        shutil.copytree(folders / "llama", at / "edited")
        config = json.loads((at / "edited" / "config.json").read_text())
        config["intermediate_size"] = 128
        (at / "edited" / "config.json").write_text(json.dumps(config))
        return "edited"
    if kind in ("indivisible-hidden", "odd-head-dim"):
        shutil.copytree(folders / "llama", at / kind)
        config = json.loads((at / kind / "config.json").read_text())
        if kind == "odd-head-dim":
            config["head_dim"] = 7
        else:
            config.pop("head_dim", None)
            config["hidden_size"] = config["hidden_size"] + 1
        (at / kind / "config.json").write_text(json.dumps(config))
        return kind
    if kind.startswith("huge-"):
        shutil.copytree(folders / "llama", at / kind)
        config = json.loads((at / kind / "config.json").read_text())
        key, value = {
            "huge-layers": ("num_hidden_layers", 20_000_000),
            "huge-vocab": ("vocab_size", 2 * 10**9),
        }[kind]
        config[key] = value
        (at / kind / "config.json").write_text(json.dumps(config))
        return kind
    assert kind == "another-family"
    shutil.copytree(folders / "llama", at / kind)
    config = json.loads((at / kind / "config.json").read_text())
    (at / kind / "config.json").write_text(json.dumps({**config, "model_type": "mistral"}))
    return kind


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_weights_mistake_is_a_located_check_error(mistake, folders, tmp_path):
    written = _make(mistake, folders, tmp_path)
    path = spec(tmp_path, LLAMA_SPEC, f'weights = "{written}"')
    column = path.read_text().splitlines()[1].index('"') + 1  # the value, quote included
    _error_at(run_cli("check", str(path), "--strict", cwd=REPO), 2, column, *MISTAKES[mistake])


def test_a_setting_or_preset_unlike_the_checkpoint_is_an_error_where_it_is_written(folders, tmp_path):
    shutil.copytree(folders / "mmdit", tmp_path / "mmdit")
    shutil.copytree(folders / "llama", tmp_path / "llama")
    path = spec(tmp_path, MMDIT_SPEC, 'weights = "mmdit"\n    joint_attention_dim = 4096')
    result = run_cli("check", str(path), cwd=REPO)
    _error_at(result, 3, 27, "joint_attention_dim = 4096", "the checkpoint's config gives 64")
    path = spec(tmp_path, LLAMA_SPEC, 'preset = "llama-2-7b"; weights = "llama"')
    _error_at(
        run_cli("check", str(path), cwd=REPO),
        2,
        26,
        'preset "llama-2-7b" is not the checkpoint',
        "hidden 4096 where the checkpoint has 64",
    )
    # a value written equal to the checkpoint's is fine
    path = spec(tmp_path, LLAMA_SPEC, 'weights = "llama"; hidden = 64; kv_heads = 2')
    assert run_cli("check", str(path), "--strict", cwd=REPO).code == 0


@pytest.mark.integration
def test_a_full_run_loads_the_checkpoint_it_checked(folders, tmp_path):
    """Not --smoke: the program checks the folder, then loads it; the model it builds holds
    the marker, and the metrics say what was checked and loaded."""
    shutil.copytree(folders / "llama", tmp_path / "llama")
    path = spec(tmp_path, LLAMA_SPEC, 'weights = "llama"')
    result = benchc("run", str(path), "-o", "build", "--db", "r.db", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    (metrics,) = tmp_path.glob("build/**/runs/*/metrics.json")
    record = json.loads(metrics.read_text())
    assert record["status"] == "ok"
    assert record["weights"] == {
        "path": str(tmp_path / "llama"),
        "tensors": 21,
        "checked": True,
        "loaded": True,
    }
    (program,) = tmp_path.glob("build/**/bench.py")
    model = model_from_local_weights(load_program(program))
    assert model.model.norm.weight[0].item() == MARKER  # the folder's weights, not random ones
    assert "local_files_only=True" in program.read_text()


@pytest.mark.integration
def test_smoke_checks_the_checkpoint_in_the_program_then_runs_the_tiny_model(folders, tmp_path):
    shutil.copytree(folders / "mmdit", tmp_path / "mmdit")
    path = spec(tmp_path, MMDIT_SPEC, 'weights = "mmdit"')
    result = benchc("run", str(path), "--smoke", "-o", "build", "--db", "r.db", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"--smoke keeps weights = {tmp_path / 'mmdit'}" in result.stderr + result.stdout
    (metrics,) = tmp_path.glob("build/**/runs/*/metrics.json")
    record = json.loads(metrics.read_text())
    assert record["status"] == "ok" and record["smoke"] is True
    assert record["weights"]["checked"] is True and record["weights"]["loaded"] is False
    log = next(tmp_path.glob("build/**/runs/*/log.txt")).read_text()
    assert "tensors match the model; smoke: the tiny model runs with random weights" in log
    # the folder changed after the compile: the program's own check refuses it, saying why
    config = json.loads((tmp_path / "mmdit" / "config.json").read_text())
    config["joint_attention_dim"] = 96
    (tmp_path / "mmdit" / "config.json").write_text(json.dumps(config))
    (point,) = {p.parent for p in tmp_path.glob("build/**/bench.py")}
    result = benchc("run", str(point), "--db", "r.db", cwd=tmp_path)
    assert result.returncode == 1
    failed = max(tmp_path.glob("build/**/runs/*/metrics.json"), key=os.path.getmtime)
    error = json.loads(failed.read_text())["error"]["message"]
    assert "do not match the model its config builds" in error and "context_embedder.weight" in error


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """The smoke SD3 pipeline, saved whole by StableDiffusion3Pipeline.save_pretrained."""
    root = tmp_path_factory.mktemp("sd3")
    point = compile_point(root / "build", "sd3-infer.bench")
    return sd3_checkpoint(root / "pipeline", load_program(point / "bench.py"))


def test_an_sd3_pipeline_folder_is_checked_part_by_part_and_its_transformer_gives_the_shape(
    pipeline, tmp_path
):
    path = spec(tmp_path, SD3_SPEC, f'weights = "{pipeline}"')
    plan = plan_json(path, cwd=REPO)
    config = json.loads((pipeline / "transformer" / "config.json").read_text())
    assert plan["model"]["transformer"]["depth"] == config["num_layers"]
    assert plan["model"]["weights"] == str(pipeline)
    # a transformer folder is not a pipeline; a pipeline without T5 cannot run text_encoders t5
    path = spec(tmp_path, SD3_SPEC, f'weights = "{pipeline / "transformer"}"')
    _error_at(run_cli("check", str(path), cwd=REPO), 2, 25, "has no model_index.json", "write model mmdit")
    lean = tmp_path / "lean"
    shutil.copytree(pipeline, lean)
    shutil.rmtree(lean / "text_encoder_3")
    index = json.loads((lean / "model_index.json").read_text())
    index["text_encoder_3"] = [None, None]
    (lean / "model_index.json").write_text(json.dumps(index))
    path = spec(tmp_path, SD3_SPEC, f'weights = "{lean}"')
    _error_at(run_cli("check", str(path), cwd=REPO), 2, 25, "without its T5 encoder")
    path = spec(tmp_path, SD3_SPEC, f'weights = "{lean}"; text_encoders = [clip_l, clip_g]')
    assert run_cli("check", str(path), cwd=REPO).code == 0


@pytest.mark.integration
def test_a_full_sd3_run_loads_every_part_of_the_pipeline_folder(pipeline, tmp_path):
    path = spec(tmp_path, SD3_SPEC, f'weights = "{pipeline}"')
    result = benchc("run", str(path), "-o", "build", "--db", "r.db", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    (metrics,) = tmp_path.glob("build/**/runs/*/metrics.json")
    record = json.loads(metrics.read_text())
    parts = ("transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3")
    saved = sum(len(_names(pipeline / part)) for part in parts)
    assert record["status"] == "ok"
    assert record["weights"]["loaded"] is True and record["weights"]["tensors"] == saved
    (program,) = tmp_path.glob("build/**/bench.py")
    module = load_program(program)
    pipe = module.build_pipeline(
        module.PLAN["model"], module.StableDiffusion3Pipeline, {}, {}, torch.float32, torch.device("cpu")
    )
    assert pipe.transformer.proj_out.bias[0].item() == MARKER


def _names(folder: Path) -> list[str]:
    from safetensors import safe_open

    names = []
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, framework="pt") as weights:
            names += list(weights.keys())
    return names


@pytest.mark.integration
def test_programs_with_a_checkpoint_load_local_files_only_and_are_lint_clean(folders, pipeline, tmp_path):
    """No generated program may reach the network for its weights: every from_pretrained and
    load_config call passes local_files_only=True; each program (three kinds, three targets,
    full and smoke) is formatted and lint clean as every program is (tests/test_codegen.py)."""
    shutil.copytree(folders / "llama", tmp_path / "llama")
    shutil.copytree(folders / "mmdit", tmp_path / "mmdit")
    kinds = ((LLAMA_SPEC, 'weights = "llama"'), (MMDIT_SPEC, 'weights = "mmdit"'),
             (SD3_SPEC, f'weights = "{pipeline}"'))  # fmt: skip
    programs = []
    for index, (target, (text, model), smoke) in enumerate(
        (t, k, s) for t in ("cpu", "h100", "gaudi2") for k in kinds for s in ((), ("--smoke",))
    ):
        text = text.replace("targets = [cpu]", f"targets = [{target}]")
        if target == "gaudi2" and "model sd3" in text:
            # optimum-habana's SD3 pipeline always runs FusedSDPA: check holds attention to fused
            text = text.replace("precision = fp32 }", "precision = fp32; attention = fused }")
        path = spec(tmp_path, text, model)
        out = tmp_path / f"out{index}"
        result = run_cli("compile", str(path), "-o", str(out), "--target", target, *smoke, cwd=REPO)
        assert result.code == 0, result.err
        programs += list(out.glob("**/bench.py"))
    assert len(programs) == 18
    calls = 0
    for program in programs:
        source = program.read_text()
        assert "def check_checkpoint" in source
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("from_pretrained", "load_config"):
                    calls += 1
                    assert any(k.arg == "local_files_only" for k in node.keywords), ast.unparse(node)
    # the meta check in every program, the load in each full one but the Llama's (benchc reads
    # its tensors; a smoke run checks the folder and runs random weights)
    read_by_benchc = sum("weights = WeightFiles(folder)" in p.read_text() for p in programs)
    assert read_by_benchc == 3 and calls >= 2 * len(programs) - read_by_benchc
    ruff = [sys.executable, "-m", "ruff"]
    names = [str(p) for p in programs]
    fmt = subprocess.run([*ruff, "format", "--isolated", "--check", *names], capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    lint = subprocess.run([*ruff, "check", "--isolated", "--select", "E,F,W,I,B", "--ignore", "E501", *names],
                          capture_output=True, text=True)  # fmt: skip
    assert lint.returncode == 0, lint.stdout + lint.stderr
