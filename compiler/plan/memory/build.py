"""The model built whole before it is sharded or split. No torch.

One job: the bytes each device holds while the program builds the whole model (training in
fp32, inference in its precision) and what the build makes beside it, 0 where it builds on the
meta device or ZeRO-3 partitions as it creates; and those words for the estimate's table.
"""

from __future__ import annotations

from ..types import CausalLM, InferWorkload, MMDiTModel, Plan
from .parameters import block_and_root, parameters
from .parts import BYTES, FP32
from .units import model_buffers


def whole_build(plan: Plan) -> float:
    """Bytes each device holds when the program builds the whole model before sharding or
    splitting it: training in fp32 (the master weights) with its buffers, inference in its
    precision (built on the device in it, never cast after); 0 where it builds on the meta
    device or DeepSpeed's ZeRO-3 partitions each parameter as it is created. On top, what
    the build makes while the whole model is there: fused q/k/v projections (the qkv knob:
    each attention's fused layer is made before the separate ones are dropped, all of them,
    and the concatenation copied into the one being made), FSDP2's shards of one group; a
    tensor-parallel split, the largest projection whole (rank 0 copies its chunks to scatter
    them) and this rank's part of it."""
    w, dims, m = plan.workload, plan.dims, plan.model
    if isinstance(w, InferWorkload):
        # unsplit, the model built is the weights themselves: nothing before the steady state
        if not dims.tensor_parallel or dims.meta_init:
            return 0.0
        b, t = BYTES[w.precision], dims.tensor
        largest = m.hidden * max(m.heads * m.head_dim, m.mlp_width) if isinstance(m, CausalLM) else 0
        return b * sum(parameters(plan).values()) + b * largest * (1 + 1 / t)
    if dims.zero_stage == 3 and dims.distributed:
        return 0.0
    if dims.fsdp:
        # on the meta device; under accelerate, rank 0 builds in host memory and sends shards
        if plan.runtime == "accelerate" or dims.meta_init:
            return 0.0
    return FP32 * (plan.cost.params + _build_extra(plan)[0]) + model_buffers(plan, FP32)


def _build_extra(plan: Plan) -> tuple[float, str]:
    """Parameters' worth of what a training build makes beside the whole model, and what it is."""
    m, dims = plan.model, plan.dims
    fused = 0
    if plan.tuning is not None and plan.tuning.qkv == "fused" and isinstance(m, MMDiTModel):
        # q, k, v of both streams with biases, and the concatenation of the one being made
        fused = (2 * m.depth + 1) * 3 * m.hidden * (m.hidden + 1)
    block, _ = block_and_root(plan)
    sharding = block / dims.data if dims.fsdp else 0
    if fused >= sharding and fused:
        return fused, "the separate q/k/v projections while the fused ones are made"
    if sharding:
        return sharding, "FSDP2's shards of one block"
    return 0, ""


def build_formula(plan: Plan) -> str:
    """What `whole_build` counts, in words, for the estimate's table."""
    if isinstance(plan.workload, InferWorkload):
        return "b B x P, the largest projection whole and this rank's part of it"
    extra = _build_extra(plan)[1]
    buffers = ", and its buffers" if model_buffers(plan, FP32) else ""
    return "fp32, 4 B x P" + buffers + (f", with {extra}" if extra else "")
