"""The moments of a training step and what each holds, per sharding. No torch.

One job: every moment of a step that could be its peak (the forward's end, each unit of the
backward, FSDP2's all-gather and reduce-scatter, DeepSpeed's reduction, the optimizer step),
each with the parts held then, for sharding none (one device or DDP), FSDP2 and ZeRO-1, 2 and
3; and the peak among them.
"""

from __future__ import annotations

from ..types import Plan
from .parameters import block_and_root
from .parts import BYTES, FP32, ZERO3_LIVE, ZERO3_PREFETCH, ZERO_REDUCE_BUCKET, Part
from .units import (
    Unit,
    _left,
    _step_temporaries,
    backward_units,
    largest_parameter,
    model_buffers,
    optimizer_states,
    training_batch,
)

Phase = tuple[str, list[Part]]  # a moment of the step, and what it holds then


def _none_phases(plan: Plan, units: list[Unit], held: list[Part], loss: float) -> list[Phase]:
    """One device or DDP: fp32 weights 4P, optimizer state kP, and on CUDA and the CPU DDP's
    gradient buckets 4P (no gradient_as_bucket_view). The gradients (fp32, 4 B) exist only
    from the backward to the end of the step (zero_grad(set_to_none=True)), as the backward
    frees each unit's saved tensors: the forward's end holds every unit's saved tensors and
    none of them; during unit j's backward, the gradients of the units done (j's included)
    and the saved tensors of those not done. They are there before the backward where earlier
    micro batches made them (grad_accum > 1), or where they are views of DDP's buckets (the
    Gaudi adapter sets gradient_as_bucket_view)."""
    p, dims = plan.cost.params, plan.dims
    k, name = optimizer_states(plan) * FP32, plan.workload.optimizer.name
    view = dims.distributed and plan.target.family == "hpu"
    base = [
        Part("weights", FP32 * p, "fp32 parameters: 4 B x P"),
        Part("optimizer", k * p, f"{name}: {k} B x P of fp32 state"),
        *held,
    ]
    if dims.distributed and not view:
        base.append(Part("buckets", FP32 * p, "DDP's gradient buckets (no gradient_as_bucket_view): 4 B x P"))
    ready = view or plan.workload.grad_accum > 1
    grads = "DDP's buckets, which the gradients are views of: 4 B x P" if view else "fp32 gradients: 4 B x P"
    cached = sum(u.cached for u in units)
    forward = [
        *base,
        Part(
            "activations",
            sum(u.saved for u in units) + cached,
            "every unit's saved tensors" + (", autocast's weight copies" if cached else ""),
        ),
    ]
    if ready:
        forward.append(Part("gradients", FP32 * p, grads))
    forward.append(Part("loss", loss, "the loss's tensors"))
    phases = [("the forward's end", forward)]
    for j, unit in enumerate(units):
        left = _left(plan, units, j)
        if ready:  # the unit's new gradient, before it is added to the one there
            made, how = FP32 * (p + unit.params), f"{grads}, + {unit.name}'s new one"
        else:
            made, how = (
                FP32 * sum(u.params for u in units[: j + 1]),
                f"fp32 gradients of the units up to {unit.name}",
            )
        phases.append(
            (
                f"the backward of {unit.name}",
                [
                    *base,
                    Part("gradients", made, how),
                    Part(
                        "activations",
                        left,
                        f"the saved tensors of {unit.name} and those before it, "
                        "the gradients flowing through it",
                    ),
                    Part("loss", loss if j == 0 else 0.0, "the loss's tensors"),
                ],
            )
        )
    temporaries, how = _step_temporaries(plan, p)
    step = [*base, Part("gradients", FP32 * p, grads)]
    if temporaries:
        step.append(Part("working", temporaries, how))
    phases.append(("the optimizer step", step))
    return phases


def _fsdp_phases(plan: Plan, units: list[Unit], held: list[Part], loss: float) -> list[Phase]:
    """FSDP2 (fully_shard per block, then the root; parameters all-gathered in b, gradients
    reduce-scattered in fp32): fp32 shards 4P/N (the master weights), state kP/N, gradient
    shards 4P/N (the reduce-scatter's outputs, made in the backward). The root (embeddings,
    head; not resharded after the forward) stays gathered in b from the forward to the end of
    the backward, and its gradients in b gather there. Each block's backward holds its
    gathered parameters, the next block's (prefetched), its gradients in b, and the previous
    block's reduce-scatter input (4 B, kept until this block reduces); its all-gather briefly
    holds the gathered buffer beside the parameters' copy of it, and its reduce-scatter its
    fp32 input and output beside the gradients in b. On the CPU gloo's reduce-scatter works on
    a copy of its input, kept as long (x 2). Every micro batch reduce-scatters (both
    runtimes): with accumulation the fp32 shards of earlier micro batches, 4P/N, are held
    from the forward on, and the unsharded gradients never outlive their block."""
    p, n, b = plan.cost.params, plan.dims.data, BYTES[plan.workload.precision]
    k, name = optimizer_states(plan) * FP32, plan.workload.optimizer.name
    copies = 2 if plan.target.family == "cpu" else 1  # gloo's copy of the reduce-scatter input
    accumulated = plan.workload.grad_accum > 1  # shards of earlier micro batches
    root = units[0].params + units[-1].params
    base = [
        Part("weights", FP32 * p / n, "fp32 parameter shards (the master weights): 4 B x P / N"),
        Part("optimizer", k * p / n, f"{name}: {k} B x P / N"),
        *held,
        Part("root", b * root, f"the root (embeddings, head) gathered in {b} B"),
    ]
    forward = [
        *base,
        Part("activations", sum(u.saved for u in units), "every unit's saved tensors"),
        Part("loss", loss, "the loss's tensors"),
    ]
    if accumulated:
        shards = "fp32 gradient shards of earlier micro batches: 4 B x P / N"
        forward.append(Part("gradients", FP32 * p / n, shards))
    phases = [("the forward's end", forward)]

    def backward(j: int, working: float, how: str, moment: str = "compute") -> list[Part]:
        """What unit j's backward holds at `moment`: before it (all-gather: its saved tensors
        and the gradient arriving), while it computes (its recompute and gradients of
        activations too), or after it (reduce-scatter: the saved tensors of those before it
        and the gradient it passed on)."""
        unit = units[j]
        done = p if accumulated else sum(u.params for u in units[1:j])  # shards held
        head = units[0].params + (unit.params if unit is units[-1] else 0)
        left = _left(plan, units, j, moment)
        # the block's gradients in b: made while it computes, copied into the reduce-scatter's
        # input after
        in_b = moment in ("compute", "reduce-scatter")
        held = (
            "fp32 shards of every block (earlier micro batches)"
            if accumulated
            else "fp32 shards of the blocks reduced"
        )
        made = b * head + (b * unit.params if in_b and 0 < j < len(units) - 1 else 0)
        return [
            *base,
            Part(
                "gradients",
                FP32 * done / n + made,
                f"{held}, the gradients in {b} B so far",
            ),
            Part("working", working, how),
            Part("activations", left, f"the saved tensors left at {unit.name}'s {moment}"),
            Part("loss", loss if j == 0 else 0.0, "the loss's tensors"),
        ]

    phases.append(("the backward of the head", backward(0, 0.0, "")))
    previous = 0  # parameters of the block reduced last: its reduce-scatter input is kept
    for j in range(1, len(units) - 1):
        g = units[j].params
        following = units[j + 1].params if j + 1 < len(units) - 1 else 0  # prefetched
        kept = copies * FP32 * previous
        moments = {
            "all-gather": (
                2 * b * g + kept,
                f"{b} B x 2 x the block (gathered and copied out), the "
                f"previous reduce-scatter input x {copies}",
            ),
            "compute": (
                b * g + b * following + kept,
                f"the block in {b} B, the next block prefetched, the "
                f"previous reduce-scatter input x {copies}",
            ),
            "reduce-scatter": (
                b * following + (copies * FP32 + FP32 / n) * g,
                f"the reduce-scatter's fp32 input x {copies} and output, the next block prefetched",
            ),
        }
        for moment, (working, how) in moments.items():
            phases.append((f"the backward of {units[j].name}: {moment}", backward(j, working, how, moment)))
        previous = g
    last = len(units) - 1
    phases.append(
        (
            "the backward of the embeddings",
            backward(last, copies * FP32 * previous, "the previous reduce-scatter input"),
        )
    )
    reduce = backward(
        last,
        (copies * FP32 + FP32 / n) * root,
        f"the root's reduce-scatter (fp32 input x {copies} and output)",
        "reduce-scatter",
    )
    phases.append(("the root's reduce-scatter", [q for q in reduce if q.name != "root"]))
    temporaries, how = _step_temporaries(plan, p / n)
    step = [*base[:-1], Part("gradients", FP32 * p / n, "fp32 gradient shards: 4 B x P / N")]
    if temporaries:
        step.append(Part("working", temporaries, how))
    phases.append(("the optimizer step", step))
    return phases


def _zero_phases(plan: Plan, units: list[Unit], held: list[Part], loss: float) -> list[Phase]:
    """DeepSpeed ZeRO (the model cast to b; tests/test_memory_estimate.py measures each part):
    the 16-bit parameters bP (ZeRO-3: bP/N, and a b-byte gradient partition bP/N kept
    whole), the fp32 master partition and its state (4 + k)P/N, and the reduce bucket,
    b x 5e8 elements allocated whole whatever the model's size (from the first backward to the
    step; ZeRO-3 for the run). The gradients: ZeRO-1 keeps them in b (bP) until the step,
    which reduces them into an fp32 partition 4P/N; ZeRO-2 gathers them into the bucket and
    reduces each full bucket into an fp32 partition (4 B x its parameters, the one straddling
    the partition's end whole: + the largest parameter), kept to the step; ZeRO-3
    reduce-scatters each full bucket into its b-byte partition, and makes the fp32 partition
    at the step. A reduction flattens the bucket's gradients into one tensor, b x min(P, 5e8)
    (ZeRO-3 on the CPU: and gloo's copy of it); it comes at the backward's end where the whole
    model fits one bucket, else during any unit. ZeRO-3 gathers parameters as modules run: up
    to 1e9 (stage3_max_live_parameters) + 5e7 (its prefetch bucket) + one block, at most P."""
    p, n, b, stage = plan.cost.params, plan.dims.data, BYTES[plan.workload.precision], plan.dims.zero_stage
    k, name = optimizer_states(plan) * FP32, plan.workload.optimizer.name
    block, _ = block_and_root(plan)
    state = Part("optimizer", (FP32 + k) * p / n, f"fp32 master weights, {name} state: {FP32 + k} B x P / N")
    if stage == 3:
        gathered = b * min(p, ZERO3_LIVE + ZERO3_PREFETCH + block)
        base = [
            Part("weights", b * p / n, f"{b}-byte parameter partitions: {b} B x P / N"),
            state,
            Part("gradients", b * p / n, f"the {b}-byte gradient partition: {b} B x P / N"),
            Part("gathered", gathered, f"parameters gathered: {b} B x min(P, 1e9 + 5e7 + one block)"),
        ]
    else:
        base = [Part("weights", b * p, f"{b}-byte parameters: {b} B x P"), state]
    base += held
    with_bucket = [*base, Part("buckets", b * ZERO_REDUCE_BUCKET, f"DeepSpeed's reduce bucket: {b} B x 5e8")]
    one = b * min(p, ZERO_REDUCE_BUCKET)  # one bucket's gradients, flattened
    flat = one * (2 if stage == 3 and plan.target.family == "cpu" else 1)
    gloo = ", and gloo's copy of them" if flat > one else ""
    grads = {
        1: Part("gradients", b * p, f"{b}-byte gradients: {b} B x P"),
        2: Part("gradients", FP32 * (p / n + largest_parameter(plan)),
                "the fp32 gradient partition: 4 B x (P / N + the largest parameter)"),
    }.get(stage)  # fmt: skip
    ready = plan.workload.grad_accum > 1  # the gradients of earlier micro batches
    anywhere = p > ZERO_REDUCE_BUCKET  # a full bucket can be reduced during any unit's backward
    forward = [
        *with_bucket,
        Part("activations", sum(u.saved for u in units), "every unit's saved tensors"),
        Part("loss", loss, "the loss's tensors"),
    ]
    if ready and grads:
        forward.append(grads)
    phases = [("the forward's end", forward)]
    for j, unit in enumerate(units):
        parts = [
            *with_bucket,
            Part("activations", _left(plan, units, j), f"the saved tensors from {unit.name} on"),
            Part("loss", loss if j == 0 else 0.0, "the loss's tensors"),
        ]
        if stage == 1:
            made = b * p if ready else b * sum(u.params for u in units[: j + 1])
            parts.append(Part("gradients", made, f"{b}-byte gradients made so far"))
        elif grads and (ready or anywhere):
            parts.append(grads)
        if anywhere:
            parts.append(Part("working", flat, f"a bucket's gradients flattened for its reduction{gloo}"))
        phases.append((f"the backward of {unit.name}", parts))
    reduce = [
        *with_bucket,
        Part(
            "working", flat, f"the bucket's gradients flattened for the reduction: {b} B x min(P, 5e8){gloo}"
        ),
        Part("activations", units[-1].saved, "the embeddings' saved tensors"),
    ]
    if grads:
        reduce.append(grads)
    phases.append(("the reduction at the backward's end", reduce))
    partition = Part("working", FP32 * p / n, "the step's fp32 gradient partition: 4 B x P / N")
    if stage == 1:
        step = [*base, grads, partition]
    elif stage == 2:
        step = [*base, grads]
    else:
        step = [*with_bucket, partition]
    phases.append(("the optimizer step", step))
    return phases


def training_phases(plan: Plan) -> list[Phase]:
    """Every moment of a training step that could be its peak, each with what it holds."""
    sharding = plan.dims.effective_sharding
    units = backward_units(plan, halves=sharding != "fsdp")  # FSDP2 gathers and reduces whole blocks
    b = BYTES[plan.workload.precision]
    batch, loss = training_batch(plan)
    model_bytes = b if plan.dims.deepspeed else FP32  # DeepSpeed casts the model, buffers too
    held = [Part("batch", batch, "the synthetic batch, kept for the run")]
    buffers = model_buffers(plan, model_bytes)
    if buffers:
        held.append(
            Part("buffers", buffers, f"the position embedding table: {model_bytes} B x max_size^2 x h")
        )
    if sharding == "none":
        return _none_phases(plan, units, held, loss)
    if sharding == "fsdp":
        return _fsdp_phases(plan, units, held, loss)
    return _zero_phases(plan, units, held, loss)


def peak_phase(phases: list[Phase]) -> Phase:
    """The phase that holds the most (the first of equals)."""
    return max(phases, key=lambda phase: sum(q.bytes for q in phase[1]))
