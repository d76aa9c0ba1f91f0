"""How a program reads a causal LM's or a Flux transformer's local weights, and what that costs
the host.

One job: `weights_by_rank(plan)` says whether each rank reads only its part of a weights
folder ("shards": each DTensor's part, under FSDP2 training and tensor-parallel generation on
CPU and CUDA; "partitions": each ZeRO-3 partition) or loads it whole (None), and
`host_loading(plan)` what loading it whole takes of the node's host memory: each process's
`from_pretrained` holds the whole model in fp32 (transformers' default dtype) before it is
moved to the device, so a node's processes hold devices_per_node x 4 B x P together at once.
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
    """ "shards", "partitions" or None (see the module docstring)."""
    dims = plan.dims
    if plan.model.kind not in READ_BY_RANK or plan.model.weights is None or plan.runtime != "torch":
        return None
    if dims.training and dims.zero_stage == 3 and dims.distributed:
        return "partitions"
    if dims.meta_init and (dims.fsdp if dims.training else dims.tensor_parallel):
        return "shards"
    return None


def host_loading(plan: Plan) -> HostLoading | None:
    """What loading a causal LM's or a Flux transformer's weights folder whole takes of the host;
    None where no folder is loaded whole (no weights, or each rank reads its part)."""
    if plan.model.kind not in READ_BY_RANK or plan.model.weights is None or weights_by_rank(plan):
        return None
    processes = plan.dims.devices_per_node
    how = (f"each of the node's {processes} process{'es' if processes > 1 else ''} loads the folder whole "
           "(from_pretrained, fp32) before moving it: processes x 4 B x P")  # fmt: skip
    return HostLoading(processes, float(FP32 * plan.model.census.params), how)
