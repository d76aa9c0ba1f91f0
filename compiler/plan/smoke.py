"""`--smoke`: shrink a resolved variant to laptop size while keeping every code path.

Same model kind, workload, precision, attention kernel, sharding, checkpointing and parallel
*kinds* (data, tensor or pipeline parallel stay on, at degree 2), on 2 processes: 2 nodes x 1
process where the real plan spans nodes (so the launchers' multi-node branch runs), else 1 node
x 2 processes (1 process where the real benchmark runs on one device),
with a tiny model, a few steps and a CPU-sized batch (a Llama keeps grouped-query attention and
a head_dim other than hidden / heads where the real model has them). Sweep points stay
distinct where the swept value survives the shrink (a batch of 16 vs 32 becomes 2 vs 4).
"""

from __future__ import annotations

import copy
import dataclasses

from ..catalog.presets import SMOKE_EXPERTS, SMOKE_LLAMA_HEAD_DIM, SMOKE_MODEL, SMOKE_SLIDING_WINDOW
from .lower import Resolved

SMOKE_PROCESSES = 2
SMOKE_BATCH_DIVISOR = 8
SMOKE_MAX_BATCH = 4


def shrink(resolved: Resolved, real_grad_accum: int = 1) -> Resolved:
    """`real_grad_accum`: the accumulation of the real plan (which may derive it)."""
    real_nodes = int(resolved.cluster["nodes"])
    real_world = real_nodes * int(resolved.cluster["devices_per_node"])
    processes = SMOKE_PROCESSES if real_world > 1 else 1  # a one-device benchmark stays one
    nodes = SMOKE_PROCESSES if real_nodes > 1 else 1  # a multi-node plan stays multi-node
    r = dataclasses.replace(
        resolved,
        model=copy.deepcopy(resolved.model),
        workload=copy.deepcopy(resolved.workload),
        cluster={"nodes": nodes, "devices_per_node": processes // nodes},
        parallel=dict(resolved.parallel),
        measure={**resolved.measure, "repeat": 1, "timeout": 900},
    )
    # Parallel degrees: keep each kind of parallelism that the real run uses, at degree 2.
    tensor, pipeline = int(r.parallel["tensor"]), int(r.parallel["pipeline"])
    r.parallel["tensor"] = processes if tensor > 1 else 1
    r.parallel["pipeline"] = processes if pipeline > 1 and tensor == 1 else 1
    r.parallel["data"] = processes // (r.parallel["tensor"] * r.parallel["pipeline"])

    model = r.model
    if r.model_kind in ("llama", "causal_lm"):
        grouped = model["kv_heads"] is not None and int(model["kv_heads"]) < int(model["heads"])
        written = model.get("head_dim")
        own_head_dim = written is not None and int(written) * int(model["heads"]) != int(model["hidden"])
        model.update(SMOKE_MODEL["llama"])
        model["kv_heads"] = 2 if grouped else model["heads"]  # keep grouped-query attention
        # keep a head_dim other than hidden / heads (q and o not square), at the smoke size
        model["head_dim"] = SMOKE_LLAMA_HEAD_DIM if own_head_dim else None
        if model.get("experts"):  # keep routing: a token to 2 of 4 experts
            model.update(SMOKE_EXPERTS)
        if model.get("sliding_window"):  # keep the window, shorter than the smoke sequence
            model["sliding_window"] = SMOKE_SLIDING_WINDOW
        extra = dict(model.get("config_extra") or {})
        extra.pop("layer_types", None)  # laid out again for the smoke model's layers
        model["config_extra"] = extra
    else:
        model.update(SMOKE_MODEL[r.model_kind])
        if "caption_projection_dim" in model:
            model["caption_projection_dim"] = None  # derived: the smoke model's hidden size
    model["preset"] = None
    # real weights never fit a smoke run: the program checks the folder against the model
    # the full run builds from it, then runs the tiny model with random weights
    model["checkpoint"] = model["weights"]
    model["weights"] = None

    w = r.workload
    if r.workload_kind == "train":  # keep accumulation on if the real run accumulates
        w["grad_accum"] = min(real_grad_accum, 2)
    w["batch"] = max(1, min(SMOKE_MAX_BATCH, int(w["batch"]) // SMOKE_BATCH_DIVISOR))
    w["warmup"] = min(int(w["warmup"]), 2)
    w["steps"] = w["warmup"] + 3
    if r.workload_kind == "train":
        w["global_batch"] = None  # re-derived from the shrunk batch and data degree
        if w.get("resolution") is not None:
            w["resolution"] = 128  # 16x16 latents
        if w.get("seq_len") is not None:
            w["seq_len"] = 64
    else:
        if w.get("resolution") is not None:
            w["resolution"] = 128
        if w.get("denoising_steps") is not None:
            w["denoising_steps"] = 2
        if w.get("input_tokens") is not None:
            w["input_tokens"] = 16
            w["output_tokens"] = 32
    return r
