"""Will each point fit in its target's memory? One job: a located warning for a point that will
not (an error under `benchc check --strict`), saying by how much and which remedies would make
it fit, each with the total it would give (plan/memory.py's estimate, the one used by
`benchc estimate`).

The warning sits at the setting that causes the overflow: the batch when what grows with it
(activations, KV cache) is the larger share, else the model (its preset, or its block).
"""

from __future__ import annotations

import dataclasses
import math

from ..diagnostics import Diagnostic, Note
from ..plan.lower import Resolved
from ..plan.memory import GB, estimate_memory
from ..plan.types import InferWorkload, LlamaModel, Plan

BATCH_PARTS = ("activations", "kv_cache")  # what grows with the batch
# the model settings that set its size, most telling first: the warning sits at the first written
SIZE_SETTINGS = ("depth", "layers", "hidden", "intermediate", "heads", "head_dim", "vocab", "preset")


MORE_MEMORY = "or a target with more memory (benchc targets)"


def _gb(value: float) -> str:
    return f"{value / GB:,.1f} GB"


def _total_with(plan: Plan, **parallel) -> float:
    changed = dataclasses.replace(plan, parallel=dataclasses.replace(plan.parallel, **parallel))
    return estimate_memory(changed).total


def _growing(memory) -> float:
    return sum(memory.part(name) for name in BATCH_PARTS)


def _largest_batch(plan: Plan, memory) -> int:
    """The largest batch that fits: what grows with the batch grows linearly in it."""
    w = plan.workload
    batch = w.batch if isinstance(w, InferWorkload) else w.micro_batch
    growing = _growing(memory)
    fixed = memory.steady - growing
    if growing <= 0 or fixed >= memory.capacity or memory.build > memory.capacity:
        return 0
    return min(batch - 1, math.floor((memory.capacity - fixed) / (growing / batch)))


def _remedies(plan: Plan, memory) -> list[str]:
    found = []
    capacity = memory.capacity
    verdict = lambda total: f"{_gb(total)}, {'fits' if total <= capacity else 'still over'}"  # noqa: E731
    p, w = plan.parallel, plan.workload
    inference = isinstance(w, InferWorkload)
    largest = _largest_batch(plan, memory)
    key = "infer.batch" if inference else "train.batch"
    if largest >= 1:
        keep = "" if inference else " (raise train.grad_accum to keep the global batch)"
        found.append(f"a smaller batch: {key} = {largest} or less fits{keep}")
    if inference:
        m = plan.model
        wider = p.tensor * 2
        if isinstance(m, LlamaModel) and m.kv_heads % wider == 0:
            found.append(f"more tensor parallelism: parallel.tensor = {wider} on as many devices "
                         f"({verdict(_total_with(plan, tensor=wider))})")  # fmt: skip
        elif not isinstance(m, LlamaModel):
            found.append('a smaller model (preset = "sd3-medium"): the SD3 pipeline runs on one device')
        return found + [MORE_MEMORY]
    if not p.activation_checkpointing:
        total = memory.total - memory.activations_off + memory.activations_on
        found.append(f"activation checkpointing: parallel.activation_checkpointing = true ({verdict(total)})")
    if plan.cluster.world_size > 1 and p.sharding not in ("fsdp", "zero3"):
        name = "zero3" if plan.target.family == "hpu" else "fsdp"
        found.append(f"sharding the weights, gradients and optimizer state: parallel.sharding = {name} "
                     f"({verdict(_total_with(plan, sharding=name))})")  # fmt: skip
    elif p.sharding in ("fsdp", "zero3") and memory.total - _growing(memory) > memory.total - capacity:
        found.append("more devices to shard over (cluster.nodes): the states shrink as 1 / data degree")
    found.append(
        "more tensor parallelism splits every layer, but tensor-parallel training is not generated yet"
    )
    return found + [MORE_MEMORY]


def check_fits(plan: Plan, resolved: Resolved) -> list[Diagnostic]:
    if plan.cost is None:
        return []
    memory = estimate_memory(plan)
    if memory.fits is not False:
        return []
    t = plan.target
    over = memory.total - memory.capacity
    growing = _growing(memory)
    kind = plan.workload.kind
    settings = resolved.settings
    if memory.build > memory.steady:
        model = plan.model.kind
        written = [k for k in SIZE_SETTINGS if settings.has(("model", model, k))]
        at = settings.span(("model", model, written[0])) if written else settings.span(("model", model), True)
        cause = (f"the peak is the build: the whole model ({_gb(memory.build)}) before it is "
                 "sharded or split")  # fmt: skip
    elif growing >= memory.total - growing:
        at = settings.span((kind, "batch"))
        cause = f"what grows with the batch ({_gb(growing)}) is the larger share"
    else:
        model = plan.model.kind
        written = [k for k in SIZE_SETTINGS if settings.has(("model", model, k))]
        at = settings.span(("model", model, written[0])) if written else settings.span(("model", model), True)
        what = (
            "weights"
            if isinstance(plan.workload, InferWorkload)
            else "weights, gradients and optimizer state"
        )
        cause = f"the model's {what} ({_gb(memory.total - growing)}) are the larger share"
    parts = ", ".join(f"{p.name} {_gb(p.bytes)}" for p in memory.parts)
    remedies = _remedies(plan, memory)
    if remedies == [MORE_MEMORY]:
        remedies = [MORE_MEMORY.removeprefix("or ")]
    ratio = memory.total / memory.capacity
    return [
        Diagnostic(
            f"{t.name} / {plan.point} will not fit in memory: {_gb(memory.total)} per device, "
            f"{_gb(over)} over the {t.memory_gb:g} GB of one {t.name} ({ratio:.2f}x)",
            at,
            hint="; ".join(remedies) if remedies else None,
            notes=(Note(f"per device: {parts}; {cause} (benchc estimate shows each formula)"),),
            severity="warning",
        )
    ]
