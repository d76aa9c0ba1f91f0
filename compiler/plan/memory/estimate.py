"""The memory estimate of one plan: its parts at the peak, against the capacity. No torch.

One job: estimate_memory, which adds up the parts the other modules count (inference: weights,
buffers, the pipeline's call, KV cache, working set; training: the peak phase and the
activations with and without checkpointing; the whole build) into one Memory, with the capacity
it must fit: the target's memory, or on the cpu this host's (host_memory) shared by the node's
processes.
"""

from __future__ import annotations

import math
import os

from ..types import FluxPipeline, InferWorkload, Plan, SD3Pipeline
from .activations import training_activations
from .build import whole_build
from .inference import inference_working, kv_cache, pipeline_held
from .parameters import local_weights
from .parts import BYTES, GB, HOST_MEMORY_VARIABLE, Memory, Part
from .phases import peak_phase, training_phases
from .units import model_buffers


def host_memory() -> float | None:
    """This host's physical memory in bytes: BENCHC_HOST_MEMORY_BYTES where set to a positive
    number, else sysconf's pages x page size, else /proc/meminfo's MemTotal; None if none answers.
    Only fit verdicts read it (check's warnings, estimate), never a plan or a generated file."""
    try:
        value = float(os.environ.get(HOST_MEMORY_VARIABLE, "") or "nan")
        if math.isfinite(value) and value > 0:
            return value
    except ValueError:
        pass  # not a number: as if unset
    try:
        value = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if value > 0:
            return float(value)
    except (AttributeError, ValueError, OSError):
        pass
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _capacity(plan: Plan) -> dict:
    """Memory's capacity fields: the target's memory, or on the cpu this host's, shared by the
    node's processes (each holds its own copy of the parts)."""
    t = plan.target
    if t.memory_gb is not None:
        return {"capacity": t.memory_gb * GB}
    host = host_memory() if t.family == "cpu" else None
    if host is None:
        return {"capacity": None}
    processes = plan.dims.devices_per_node
    return {"capacity": host / processes, "host": host, "processes": processes}


def estimate_memory(plan: Plan) -> Memory:
    """Every part on one device at its peak, and the target's memory (None: unknown)."""
    capacity = _capacity(plan)
    if isinstance(plan.workload, InferWorkload):
        b = BYTES[plan.workload.precision]
        where = f" / tensor {plan.dims.tensor} (layers)" if plan.dims.tensor_parallel else ""
        parts = [Part("weights", b * local_weights(plan), f"{b} B x parameters{where}")]
        buffers = model_buffers(plan, b)
        if buffers:
            parts.append(
                Part(
                    "buffers",
                    buffers,
                    "CLIP-L's position ids (77 x 8 B)"
                    if isinstance(plan.model, FluxPipeline)
                    else f"the position embedding table: {b} B x max_size^2 x h"
                    + (", CLIP's position ids" if isinstance(plan.model, SD3Pipeline) else ""),
                )
            )
        if isinstance(plan.model, SD3Pipeline | FluxPipeline):
            parts.append(Part("batch", pipeline_held(plan), "the prompt embeddings and latents of the call"))
        cache = kv_cache(plan)
        if cache:
            parts.append(
                Part("kv_cache", cache, "2 x layers x batch x kv_heads/t x head_dim x (in + out) x b")
            )
        working, how = inference_working(plan)
        parts.append(Part("activations", working, how))
        return Memory(tuple(parts), build=whole_build(plan), **capacity)
    off = training_activations(plan, False)
    on = training_activations(plan, True)
    phase, parts = peak_phase(training_phases(plan))
    held = tuple(q for q in parts if q.bytes)
    return Memory(
        held, activations_off=off, activations_on=on, build=whole_build(plan), phase=phase, **capacity
    )
