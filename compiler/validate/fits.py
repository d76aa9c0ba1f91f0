"""Will each point fit in its target's memory? One job: a located warning for a point that will
not (an error under `benchc check --strict`), saying by how much and which remedies would make
it fit, each with the total it would give (plan/memory/estimate.py's, the one used by
`benchc estimate`).

The warning sits at the setting that causes the overflow: the batch when what grows with it
(activations, KV cache) is the larger share, else the model (its preset, or its block).

The cpu target states no memory: there the capacity is this host's (plan/memory/estimate.py's
host_memory), which the node's processes share, so what must fit is the per-process total x
processes per node. refuse_whole_loading refuses the one layout whose rank 0 would load a
weights folder whole on its host (the accelerate runtime's FSDP2). smoke_advice is the note for a
full-size cpu plan: --smoke is what most users want there.
"""

from __future__ import annotations

import dataclasses
import math

from ..diagnostics import Diagnostic, Note
from ..plan.lower import Resolved
from ..plan.memory import GB, estimate_memory, parameters
from ..plan.types import CausalLM, InferWorkload, Plan

BATCH_PARTS = ("activations", "kv_cache")  # what grows with the batch
# the model settings that set its size, most telling first: the warning sits at the first written
SIZE_SETTINGS = ("depth", "layers", "hidden", "intermediate", "heads", "head_dim", "vocab", "preset")


MORE_MEMORY = "or a target with more memory (benchc targets)"
SMALL_MODEL = 100_000_000  # parameters: below this a full-size cpu plan gets no --smoke advice
SMOKE = "or --smoke: a tiny model that runs every code path in a minute, what most users want on a CPU"


def _gb(value: float) -> str:
    return f"{value / GB:,.1f} GB"


def _total_with(plan: Plan, **parallel) -> float:
    """The estimate of the plan with other parallel settings (a new plan: its own plan.dims)."""
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

    def verdict(total: float) -> str:
        n = memory.processes  # the cpu: the node's processes share the host's memory
        shown = f"{n} x {_gb(total)} = {_gb(n * total)}" if memory.host else _gb(total)
        return f"{shown}, {'fits' if total <= capacity else 'still over'}"

    dims, w = plan.dims, plan.workload
    inference = isinstance(w, InferWorkload)
    largest = _largest_batch(plan, memory)
    key = "infer.batch" if inference else "train.batch"
    if largest >= 1:
        keep = "" if inference else " (raise train.grad_accum to keep the global batch)"
        found.append(f"a smaller batch: {key} = {largest} or less fits{keep}")
    if inference:
        m = plan.model
        wider = dims.tensor * 2
        split = memory.host is None  # not on the cpu: one host holds all its processes
        if isinstance(m, CausalLM) and m.kv_heads % wider == 0 and split:
            found.append(f"more tensor parallelism: parallel.tensor = {wider} on as many devices "
                         f"({verdict(_total_with(plan, tensor=wider))})")  # fmt: skip
        elif m.kind == "sd3":
            found.append('a smaller model (preset = "sd3-medium"): the SD3 pipeline runs on one device')
        elif not isinstance(m, CausalLM):
            found.append("a device with more memory: the Flux pipeline runs on one device")
        return found + _last(plan, memory)
    if not plan.parallel.activation_checkpointing:
        total = _total_with(plan, activation_checkpointing=True)
        found.append(f"activation checkpointing: parallel.activation_checkpointing = true ({verdict(total)})")
    if dims.distributed and not dims.shards_parameters:
        name = "zero3" if plan.target.family == "hpu" else "fsdp"
        found.append(f"sharding the weights, gradients and optimizer state: parallel.sharding = {name} "
                     f"({verdict(_total_with(plan, sharding=name))})")  # fmt: skip
    elif dims.shards_parameters and memory.total - _growing(memory) > memory.total - capacity:
        found.append("more devices to shard over (cluster.nodes): the states shrink as 1 / data degree")
    if memory.host is None:
        found.append(
            "more tensor parallelism splits every layer, but tensor-parallel training is not generated yet"
        )
    return found + _last(plan, memory)


def _last(plan: Plan, memory) -> list[str]:
    """More memory; on the cpu, whose processes share the host's: fewer of them, or --smoke."""
    if memory.host is None:
        return [MORE_MEMORY]
    fewer = []
    most = math.floor(memory.host / memory.total)
    replicated = plan.dims.sharding == "none" and not plan.dims.tensor_parallel
    if replicated and 1 <= most < memory.processes:
        fewer = [f"fewer processes per node: cluster.devices_per_node = {most} or less, with parallel.data "
                 f"to match ({most} x {_gb(memory.total)} = {_gb(most * memory.total)}, fits)"]  # fmt: skip
    return fewer + [SMOKE]


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
        model = resolved.model_kind
        written = [k for k in SIZE_SETTINGS if settings.has(("model", model, k))]
        at = settings.span(("model", model, written[0])) if written else settings.span(("model", model), True)
        cause = (f"the peak is the build: the whole model ({_gb(memory.build)}) before it is "
                 "sharded or split")  # fmt: skip
    elif growing >= memory.total - growing:
        at = settings.span((kind, "batch"))
        cause = f"what grows with the batch ({_gb(growing)}) is the larger share"
    else:
        model = resolved.model_kind
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
    if len(remedies) == 1:
        remedies = [remedies[0].removeprefix("or ")]
    ratio = memory.total / memory.capacity
    if memory.host is None:
        message = (f"{t.name} / {plan.point} will not fit in memory: {_gb(memory.total)} per device, "
                   f"{_gb(over)} over the {t.memory_gb:g} GB of one {t.name} ({ratio:.2f}x)")  # fmt: skip
        note = f"per device: {parts}; {cause}"
    else:
        n = memory.processes
        message = (f"{t.name} / {plan.point} will not fit in this host's memory: {n} process"
                   f"{'es' if n != 1 else ''} x {_gb(memory.total)} = {_gb(n * memory.total)}, over the "
                   f"{_gb(memory.host)} of this host ({ratio:.2f}x)")  # fmt: skip
        note = (f"per process: {parts}; {cause}; the {n} process{'es' if n != 1 else ''} of a node "
                "(cluster.devices_per_node) share the host's memory")  # fmt: skip
    return [
        Diagnostic(
            message,
            at,
            hint="; ".join(remedies) if remedies else None,
            notes=(Note(f"{note} (benchc estimate shows each formula)"),),
            severity="warning",
        )
    ]


def refuse_whole_loading(plan: Plan, resolved: Resolved) -> list[Diagnostic]:
    """A located error where a rank would hold a whole weights folder in host memory: the
    accelerate runtime's FSDP2 loads as accelerate does (cpu_ram_efficient_loading: rank 0
    builds the whole model from the folder, in fp32, and sends each rank its shards), and
    accelerate's FSDP2 prepare() cannot take a model the program sharded and read itself.
    Every other layout reads each rank's part, or each tensor onto its device
    (plan/loading.py). Not for --smoke, which runs random weights."""
    from ..plan.loading import READ_BY_RANK, weights_by_rank

    m = plan.model
    if plan.smoke or m.kind not in READ_BY_RANK or m.weights is None or weights_by_rank(plan):
        return []
    if not (plan.runtime == "accelerate" and plan.dims.fsdp):
        return []
    at = resolved.settings.span(("model", resolved.model_kind, "weights"))
    whole = _gb(4 * m.census.params)
    message = (f"{plan.target.name} / {plan.point}: under runtime = accelerate, FSDP2 would load the "
               f"weights folder whole on rank 0 ({whole} of host memory, fp32) and send each rank its "
               "shards: no rank may hold the whole model in host memory")  # fmt: skip
    hint = ("set runtime = torch, whose FSDP2 reads only each rank's shards; or leave weights out to "
            "benchmark accelerate with random weights")  # fmt: skip
    return [Diagnostic(message, at, hint=hint)]


def smoke_advice(plan: Plan) -> str | None:
    """The note for a full-size plan on the cpu (not --smoke): --smoke is what most users want."""
    if plan.smoke or plan.target.family != "cpu":
        return None
    count = sum(parameters(plan).values())
    if count < SMALL_MODEL:  # a model this small runs as it is
        return None
    return (
        f"{plan.experiment} on cpu builds the spec's full-size model ({count:,} parameters); "
        "most users want --smoke on a CPU: a tiny model that runs every code path in a minute"
    )
