"""No setting is silently ignored: every setting of the schema, changed from a reference
spec, for every target family, either changes what runs or is refused with an error located
at the setting.

"Changes what runs" means: the launcher or the Slurm job changes, or the program's PLAN
changes at a key that the program's code reads (a subscript or .get of that name outside
the PLAN literal), or inside a dict the program hands whole to a library (the model's
config, the optimizer's arguments). A key that only sits in PLAN, unread, is ignored.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from codegen_helpers import plan_literal

from benchc.codegen.points import render_point
from benchc.diagnostics import BenchError
from benchc.pipeline import plan_spec
from benchc.validate.schema import schema

from helpers import REPO

WORKLOADS = {  # spec, model kind
    "mmdit-train": ("sd3.bench", "mmdit"),
    "llama-train": ("beluga-train.bench", "llama"),
    "sd3-infer": ("sd3-infer.bench", "sd3"),
    "llama-infer": ("beluga-infer.bench", "llama"),
    "moe-train": ("qwen3-moe-train.bench", "causal_lm"),
    "moe-infer": ("mixtral-infer.bench", "causal_lm"),
    "flux-train": ("flux-train.bench", "flux"),
    "flux-infer": ("flux-infer.bench", "flux"),
}
FAMILIES = ("cpu", "h100", "gaudi2")
PASSED_WHOLE = {"config", "args", "parts"}  # dicts handed to diffusers / transformers / torch

# A value other than the spec's (or the default) for each setting, in the language's syntax.
ALTERNATIVES = {
    "preset": '"sd3-large"', "depth": "4", "heads": "4", "head_dim": "32", "patch": "4",
    "in_channels": "8", "joint_attention_dim": "1024", "caption_projection_dim": "256",
    "pooled_projection_dim": "1024", "pos_embed_max_size": "256", "qk_norm": "rms_norm",
    "text_tokens": "100", "weights": '"/models/w"', "text_encoders": "[clip_l, clip_g]",
    "t5_tokens": "128", "hidden": "4096", "layers": "4", "kv_heads": "4",
    "intermediate": "11008", "vocab": "16000", "max_positions": "8192",
    "precision": "fp32", "attention": "sdpa", "batch": "4", "grad_accum": "1",
    "global_batch": "4096", "optimizer": "sgd(lr = 0.1)", "steps": "30", "warmup": "3",
    "resolution": "512", "seq_len": "1024", "objective": "rectified_flow", "grad_clip": "0.5",
    "compile": "true", "seed": "7", "graphs": "false", "denoising_steps": "10", "guidance": "3.5",
    "input_tokens": "64", "output_tokens": "256", "kv_cache": "dynamic",
    "nodes": "4", "devices_per_node": "4", "data": "8", "tensor": "2", "pipeline": "2",
    "sharding": "zero2", "activation_checkpointing": "false", "metric": "ttft_s",
    "repeat": "3", "timeout": "600", "partition": '"p1"', "account": '"a1"', "time": '"02:00:00"',
    "gres": '"gpu:4"', "exclusive": "false", "job_name": '"j1"', "log": '"x-%j.log"',
    "optimize": "plain", "profile": "true", "config": '"/models/c"', "rope_theta": "50000.0",
    "tie_embeddings": "true", "model_type": '"qwen2"', "experts": "4", "experts_per_token": "1",
    "sliding_window": "1024", "single_depth": "4",
}  # fmt: skip
# Where a reference spec already has the alternative, the other way round.
FLIPPED = {
    # tuned compiles the MMDiT's blocks on CUDA already: there, writing false is the change
    "mmdit-train": {"grad_accum": "2", "objective": "causal_lm", "activation_checkpointing": "true",
                    "compile": {"h100": "false", "other": "true"}},
    "llama-train": {"objective": "rectified_flow", "compile": {"h100": "false", "other": "true"}},
    # tuned compiles the pipeline's MMDiT on CUDA already: there, writing false is the change
    "sd3-infer": {"graphs": {"cpu": "true", "other": "false"}, "preset": '"sd3-medium"',
                  "compile": {"h100": "false", "other": "true"},
                  "qk_norm": "none", "activation_checkpointing": "true"},
    # tuned compiles benchc's decode step on CUDA already: there, writing false is the change
    "llama-infer": {"graphs": {"cpu": "true", "other": "false"}, "kv_cache": "dynamic",
                    "compile": {"h100": "false", "other": "true"}, "activation_checkpointing": "true"},
    "moe-train": {"kv_heads": "8", "compile": {"h100": "false", "other": "true"}},
    "moe-infer": {"graphs": {"cpu": "true", "other": "false"}, "hidden": "2048", "tensor": "1",
                  "compile": {"h100": "false", "other": "true"}, "activation_checkpointing": "true"},
    # tuned compiles on CUDA, and under Habana's FSDP on Gaudi, already: there false is the change
    "flux-train": {"preset": '"flux.1-schnell"', "activation_checkpointing": "false", "attention": "eager",
                   "compile": {"h100": "false", "gaudi2": "false", "other": "true"}, "sharding": "zero2",
                   "model.flux.guidance": "false", "grad_accum": "2", "resolution": "256",
                   "objective": "causal_lm", "data": "4"},
    "flux-infer": {"preset": '"flux.1-schnell"', "graphs": {"cpu": "true", "other": "false"},
                   "compile": {"h100": "false", "other": "true"}, "model.flux.guidance": "false",
                   "infer.guidance": "5.0", "activation_checkpointing": "true", "attention": "sdpa"},
}  # fmt: skip


def leaf_settings(kind: str, workload: str) -> list[str]:
    def deref(node):
        while "$ref" in node:
            node = schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        return node

    found = []

    def walk(node, path):
        node = deref(node)
        if node.get("type") == "object" and "properties" in node:
            for key, child in node["properties"].items():
                walk(child, (*path, key))
        else:
            found.append(".".join(path))

    found.append("optimize")  # a top-level setting of every workload
    sections = ("model", workload, "cluster", "parallel", "measure", "slurm")
    for name in sections:
        node = deref(schema()["properties"][name])
        if name == "model":
            walk(node["properties"][kind], ("model", kind))
        else:
            walk(node, (name,))
    return found


def keys_read(program: str) -> set[str]:
    """String keys the code reads: x["key"] and x.get("key"), outside the PLAN literal."""
    tree = ast.parse(program)
    tree.body = [
        n for n in tree.body if not (isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PLAN")
    ]
    read = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            read.add(node.slice.value)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and node.args:
            if isinstance(node.args[0], ast.Constant):
                read.add(node.args[0].value)
    return read


def changed(a, b, path=()):
    if isinstance(a, dict) and isinstance(b, dict):
        for key in set(a) | set(b):
            yield from changed(a.get(key), b.get(key), (*path, key))
    elif a != b:
        yield path


def files_of(spec: str, family: str, overrides: list[str]):
    previous = Path.cwd()
    import os

    os.chdir(REPO)
    try:
        plans = plan_spec(Path("specs") / spec, targets=[family], overrides=overrides).plans
    finally:
        os.chdir(previous)
    return render_point(plans[0], sbatch=True)


CASES = [(w, f, key) for w, (_, kind) in WORKLOADS.items() for f in FAMILIES
         for key in leaf_settings(kind, w.split("-")[1])]  # fmt: skip


@pytest.mark.parametrize("workload, family, setting", CASES, ids=[f"{w}-{f}-{k}" for w, f, k in CASES])
def test_every_setting_changes_what_runs_or_is_refused(workload, family, setting):
    spec, _ = WORKLOADS[workload]
    name = setting.rsplit(".", 1)[-1]
    flipped = FLIPPED.get(workload, {})
    value = flipped.get(setting, flipped.get(name, ALTERNATIVES[name]))
    if isinstance(value, dict):  # the other way round on some families
        value = value.get(family, value["other"])
    base = files_of(spec, family, [])
    try:
        files = files_of(spec, family, [f"{setting}={value}"])
    except BenchError as exc:
        # refused for it: located at the setting, or a rule that names it or its value
        for_it = [d for d in exc.diagnostics
                  if (d.span is not None and d.span.source.name == "--set[1]")
                  or name in d.message or value in d.message]  # fmt: skip
        assert for_it, f"{setting}={value} refused for another reason: {exc.diagnostics[0].message}"
        return
    if files.get("launch.sh") != base.get("launch.sh") or files.get("job.sbatch") != base.get("job.sbatch"):
        return
    program = files["bench.py"]
    paths = list(changed(plan_literal(base["bench.py"]), plan_literal(program)))
    assert paths, f"{setting}={value} on {family} changes nothing"
    read = keys_read(program)
    honoured = [p for p in paths if p[-1] in read or PASSED_WHOLE & set(p[:-1])]
    assert honoured, f"{setting}={value} on {family}: PLAN {paths} changes, but the program never reads it"
