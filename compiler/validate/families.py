"""Rules of what each causal LM family can run where: optimum-habana's Gaudi classes, its
Mixtral's attention, tensor parallelism by the model's own plan, a mixture of experts under
DDP. Each refusal is located at the setting that asks for it and says what works instead.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..catalog.causal_lm import GAUDI_ALWAYS_FUSED, GAUDI_CLASSES
from ..diagnostics import Diagnostic
from ..plan.lower import Resolved
from ..plan.types import CausalLM, Plan


def check_families(plan: Plan, r: Resolved) -> list[Diagnostic]:
    if not isinstance(plan.model, CausalLM):
        return []
    return [*_gaudi(plan, r), *_tensor_parallel(plan, r), *_experts(plan, r)]


def _span(r: Resolved, *path):
    return r.settings.span(tuple(path), prefer_key=False)


def _gaudi(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    m, w = plan.model, plan.workload
    if plan.target.family != "hpu":
        return
    if m.model_type not in GAUDI_CLASSES:
        yield Diagnostic(f"optimum-habana has no Gaudi class for model_type {m.model_type}",
                         _span(r, "model", r.model_kind),
                         hint=f"optimum-habana runs: {', '.join(sorted(GAUDI_CLASSES))}")  # fmt: skip
    if m.model_type in GAUDI_ALWAYS_FUSED and w.attention != "fused":
        yield Diagnostic(f"on Gaudi, optimum-habana's {GAUDI_CLASSES[m.model_type]} always runs FusedSDPA: "
                         f"attention = {w.attention} would not be what runs", _span(r, w.kind, "attention"),
                         hint=f"write `on {plan.target.name} {{ {w.kind}.attention = fused }}`")  # fmt: skip


def _tensor_parallel(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    m, dims = plan.model, plan.dims
    if not dims.tensor_parallel:
        return
    at = _span(r, "parallel", "tensor")
    if not m.census.tp_plan:
        yield Diagnostic(f"transformers ships no tensor-parallel plan for model_type {m.model_type}", at,
                         hint="write parallel.tensor = 1")  # fmt: skip
    if m.intermediate % dims.tensor:
        yield Diagnostic(f"parallel.tensor = {dims.tensor} does not divide the model's intermediate "
                         f"({m.intermediate})", at, hint="rule: intermediate % tensor == 0")  # fmt: skip


def _experts(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    m, dims = plan.model, plan.dims
    if m.experts and dims.training and plan.runtime == "accelerate" and dims.distributed:
        if dims.effective_sharding == "none":
            yield Diagnostic("a mixture of experts under accelerate's DDP: an expert no token reached would "
                             "stall its gradient reduction", _span(r, "runtime"),
                             hint="write runtime = torch (its DDP finds unused experts), or shard with "
                             "parallel.sharding = fsdp")  # fmt: skip
