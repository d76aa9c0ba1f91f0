"""Rules of what each target's program can honour: a setting that a target's generated program
would not act on is refused here, at the setting, with what to write instead. No setting is
silently ignored (tests/test_settings_honoured.py holds every setting to it).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..diagnostics import Diagnostic
from ..plan.lower import Resolved
from ..plan.types import InferWorkload, LlamaModel, Plan, SD3Pipeline


def check_capabilities(plan: Plan, r: Resolved) -> list[Diagnostic]:
    if not isinstance(plan.workload, InferWorkload):
        return list(_gaudi_fsdp(plan, r))
    return [*_graphs(plan, r), *_generation(plan, r), *_pipeline(plan, r)]


def _gaudi_fsdp(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """Habana's FSDP runs in eager mode only (torch.compile with the HPU backend)."""
    if plan.target.family == "hpu" and plan.parallel.sharding == "fsdp" and not plan.workload.compile:
        yield Diagnostic(
            f"FSDP on {plan.target.name} needs eager mode with torch.compile; this plan runs lazy mode",
            _span(r, "parallel", "sharding"),
            hint="write parallel.sharding = zero3 (DeepSpeed, as optimum-habana's 70B recipes do), "
            "or train.compile = true for FSDP in eager mode",
        )


def _span(r: Resolved, *path):
    return r.settings.span(tuple(path), prefer_key=False)


def _graphs(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """infer.graphs runs only where the target can capture and replay graphs."""
    t = plan.target
    if plan.workload.graphs and t.graphs is None:
        yield Diagnostic(f"target {t.name} cannot run infer.graphs = true", _span(r, "infer", "graphs"),
                         hint=t.no_graphs)  # fmt: skip


def _generation(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """Generation on cpu and cuda: transformers compiles the decode step, on CUDA only and only
    with a static KV cache; and no flash kernel takes the mask a static cache comes with."""
    w, family = plan.workload, plan.target.family
    if not isinstance(plan.model, LlamaModel) or family == "hpu":
        return
    if w.compile and family == "cpu":
        yield Diagnostic(
            "infer.compile of generation is not generated for cpu", _span(r, "infer", "compile"),
            hint="transformers compiles generation on CUDA only; write `on cpu { infer.compile = false }`",
        )  # fmt: skip
    if family == "cuda" and w.kv_cache == "dynamic":
        for name in ("graphs", "compile"):
            if getattr(w, name):
                yield Diagnostic(
                    f"infer.{name} with kv_cache = dynamic is not honoured on {plan.target.name}",
                    _span(r, "infer", name),
                    hint="transformers compiles (and graphs) the decode step only for a static "
                    "cache: write infer.kv_cache = static, or infer.{name} = false",
                )  # fmt: skip
    if family == "cuda" and w.attention == "flash" and w.kv_cache == "static":
        yield Diagnostic(
            f"attention = flash cannot run generation with a static KV cache on {plan.target.name}",
            _span(r, "infer", "attention"),
            hint="a static cache always brings an attention mask, which the flash kernel does not "
            "take: write attention = fused (memory-efficient and cuDNN kernels) or kv_cache = dynamic",
        )


def _pipeline(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """The SD3 pipeline on Gaudi is optimum-habana's, in lazy mode with HPU graphs."""
    if isinstance(plan.model, SD3Pipeline) and plan.target.family == "hpu" and plan.workload.compile:
        yield Diagnostic(
            f"infer.compile of the SD3 pipeline is not generated for {plan.target.name}",
            _span(r, "infer", "compile"),
            hint="optimum-habana's SD3 pipeline runs in lazy mode with HPU graphs (infer.graphs); "
            f"write `on {plan.target.name} {{ infer.compile = false }}`",
        )
