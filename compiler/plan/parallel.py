"""The parallel layout of one plan, derived once: ParallelDims, carried on the Plan as `plan.dims`.

One job: the facts every later stage asks of a plan's parallelism (the world size and its
data x tensor x pipeline degrees, whether it spans nodes, whether DeepSpeed or FSDP shards the
training and how, whether the program builds the model on the meta device) are worked out here
from the plan's own fields, the one place they are, as torchtitan's ParallelDims does. Memory,
roofline, the validators and code generation read them instead of deriving them again.

Invariants that only a bug can break (the schema bounds every degree and names every sharding;
lower.build multiplies the world size) are asserted when the record is made. Mistakes a spec
can make, such as degrees that do not fill the cluster, are not: they are located diagnostics
in validate/semantic.py, which reads `fills_world` and `degrees` from here.
"""

from __future__ import annotations

from ..records import frozen

SHARDINGS = ("none", "fsdp", "zero1", "zero2", "zero3")  # the schema's parallel.sharding
META_INIT_PARAMS = 2e9  # inference: from this size, split the model before allocating it


@frozen
class ParallelDims:
    """nodes x devices_per_node = world_size; data x tensor x pipeline should equal it (a spec
    that breaks that is refused by validate/semantic.py, not here)."""

    nodes: int
    devices_per_node: int
    world_size: int
    data: int
    tensor: int
    pipeline: int
    sharding: str  # as the spec writes it: none | fsdp | zero1 | zero2 | zero3
    training: bool  # the workload trains (sharding applies to training only)
    meta_init: bool  # the program builds the model on the meta device (see builds_on_meta)

    def __post_init__(self) -> None:
        assert self.nodes >= 1 and self.devices_per_node >= 1, self
        assert self.world_size == self.nodes * self.devices_per_node, self
        assert min(self.data, self.tensor, self.pipeline) >= 1, self
        assert self.sharding in SHARDINGS, self

    @classmethod
    def of(cls, plan) -> ParallelDims:
        """The layout of a plan (plan.dims, cached on it: call that instead)."""
        c, p = plan.cluster, plan.parallel
        return cls(
            nodes=c.nodes,
            devices_per_node=c.devices_per_node,
            world_size=c.world_size,
            data=p.data,
            tensor=p.tensor,
            pipeline=p.pipeline,
            sharding=p.sharding,
            training=plan.workload.kind == "train",
            meta_init=builds_on_meta(plan.model, plan.workload),
        )

    @property
    def distributed(self) -> bool:
        """More than one process: a launcher starts them and a process group joins them."""
        return self.world_size > 1

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def degrees(self) -> int:
        """data x tensor x pipeline: the world size the degrees ask for."""
        return self.data * self.tensor * self.pipeline

    @property
    def fills_world(self) -> bool:
        return self.degrees == self.world_size

    @property
    def tensor_parallel(self) -> bool:
        return self.tensor > 1

    @property
    def deepspeed(self) -> bool:
        """Training sharded with DeepSpeed ZeRO (stage 1, 2 or 3)."""
        return self.training and self.sharding.startswith("zero")

    @property
    def zero_stage(self) -> int | None:
        """DeepSpeed's ZeRO stage; None where DeepSpeed is not used."""
        return int(self.sharding.removeprefix("zero")) if self.deepspeed else None

    @property
    def effective_sharding(self) -> str:
        """The sharding that runs: FSDP2 wraps nothing on one device (plain training there)."""
        return "none" if self.sharding == "fsdp" and not self.distributed else self.sharding

    @property
    def fsdp(self) -> bool:
        """FSDP2 shards the model over more than one process."""
        return self.effective_sharding == "fsdp"

    @property
    def shards_parameters(self) -> bool:
        """The spec asks for the parameters themselves to be sharded (fsdp, zero3)."""
        return self.sharding in ("fsdp", "zero3")


def builds_on_meta(model, work) -> bool:
    """Does the program build this causal LM on the meta device and allocate only each rank's
    shards? Training with FSDP2 always does (random weights need no loading; local weights
    are read shard by shard). Tensor-parallel inference does for models of 2B parameters and
    more: DTensor on CPU and CUDA, DeepSpeed's AutoTP on Gaudi (it materialises a meta model's
    shards on the card; the program then fills them). Any model with local weights is built
    there and each rank reads its part of them, or each tensor onto its device where it holds
    the whole model (plan/loading.py). A Flux transformer's training does too (12B parameters:
    a whole fp32 build is 48 GB on every rank). (The MMDiT and the pipelines are always built
    whole.)"""
    if model.kind == "flux":
        return work.kind == "train"
    if model.kind != "causal_lm":
        return False
    if model.weights is not None:
        return True
    if work.kind != "infer":
        return True
    return model.census.params >= META_INIT_PARAMS
