"""How a program reads a causal LM's or a Flux transformer's local weights, and what that costs
the host.

One job: `weights_by_rank(plan)` says how each rank reads a weights folder: only its part
("shards": each DTensor's part under FSDP2 training and tensor-parallel generation on CPU and
CUDA, each part DeepSpeed's AutoTP cut under Gaudi's; "partitions": each ZeRO-3 partition),
every tensor straight onto its device one at a time where each rank holds the whole model
there ("tensors": one device, DDP, ZeRO-1/2, generation without tensor parallelism), or by
a library (None: the pipelines, whose parts diffusers loads, and the accelerate runtime's
FSDP2, whose rank 0 would load the folder whole and send the shards: check refuses that,
validate/fits.py's refuse_whole_loading). The code generator reads it; a program's own loading
code is in templates/core_meta.py.j2.
"""

from __future__ import annotations

from .types import Plan

READ_BY_RANK = ("causal_lm", "flux")  # model kinds whose programs can read weights rank by rank


def weights_by_rank(plan: Plan) -> str | None:
    """ "shards", "partitions", "tensors" or None (see the module docstring)."""
    dims = plan.dims
    if plan.model.kind not in READ_BY_RANK or plan.model.weights is None:
        return None
    if plan.model.kind == "flux" and not dims.training:
        return None  # the whole pipeline: diffusers loads each of its parts
    if dims.training and dims.zero_stage == 3 and dims.distributed:
        return "partitions"
    if plan.runtime == "accelerate" and dims.fsdp:
        return None  # accelerate's FSDP2 loading: rank 0 loads the folder whole, sends the shards
    if dims.meta_init and (dims.fsdp if dims.training else dims.tensor_parallel):
        return "shards"
    return "tensors"
