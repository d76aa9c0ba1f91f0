"""How a program reads a causal LM's or a Flux transformer's local weights, and what that costs
the host.

One job: `weights_by_rank(plan)` says how each rank reads a weights folder: only its part
("shards": each DTensor's part under FSDP2 training and tensor-parallel generation on CPU and
CUDA, each part DeepSpeed's AutoTP cut under Gaudi's; "partitions": each ZeRO-3 partition),
every tensor straight onto its device one at a time where each rank holds the whole model
there ("tensors": one device, DDP, ZeRO-1/2, generation without tensor parallelism), or by
a library that loads it whole (None: the pipelines, and the accelerate runtime's FSDP2, whose
rank 0 loads the folder and sends the shards). And `host_loading(plan)` what loading it
whole takes of the host: that rank 0 holds the whole model in fp32 (transformers' default
dtype), 4 B x P.
The code generator and `estimate` both read these; a program's own loading code is in
templates/core_meta.py.j2.
"""

from __future__ import annotations

from ..records import frozen
from .types import Plan

FP32 = 4
READ_BY_RANK = ("causal_lm", "flux")  # model kinds whose programs can read weights rank by rank


@frozen
class HostLoading:
    processes: int  # the node's processes, each loading the folder whole
    bytes_per_process: float
    how: str

    @property
    def bytes_per_node(self) -> float:
        return self.processes * self.bytes_per_process


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


def host_loading(plan: Plan) -> HostLoading | None:
    """What loading a causal LM's or a Flux transformer's weights folder whole takes of the
    host; None where no folder is loaded whole (no weights, or each rank reads its part or
    its tensors one at a time). The one such layout is the accelerate runtime's FSDP2: rank 0
    builds the whole model from the folder (from_pretrained, fp32) and accelerate sends each
    rank its shards from there (cpu_ram_efficient_loading), as a Hugging Face script does."""
    if plan.model.kind not in READ_BY_RANK or plan.model.weights is None or weights_by_rank(plan):
        return None
    how = ("rank 0 loads the folder whole in fp32 (from_pretrained, 4 B x P) and accelerate sends each "
           "rank its shards from it (cpu_ram_efficient_loading)")  # fmt: skip
    return HostLoading(1, float(FP32 * plan.model.census.params), how)
