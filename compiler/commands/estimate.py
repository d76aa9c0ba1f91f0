"""`benchc estimate`: before any run, per target and sweep point, the parameters, the FLOPs,
the memory per device against the target's, the roofline bounds and the throughput they
allow, and what each published reference implies. A training step's roofline shows its total,
then each phase (forward+backward, the optimizer) with its bounds. Never imports torch.
"""

from __future__ import annotations

import json

from ..diagnostics import printable

EXIT_OK = 0
COMMANDS = ("estimate",)


def add_parsers(commands, variant_options) -> None:
    estimate_ = commands.add_parser(
        "estimate",
        help="per target and sweep point: parameters, FLOPs, memory per device, roofline bounds",
    )
    estimate_.add_argument("spec", metavar="SPEC")
    variant_options(estimate_)
    estimate_.add_argument("--json", action="store_true", help="print the estimates as JSON")


def _gb(value: float | None) -> str:
    """Decimal units, as the targets' memory_gb: GB, or MB/kB for a smoke model."""
    if value is None:
        return "-"
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(value) >= scale or unit == "kB":
            return f"{_figure(value / scale)} {unit}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"{_figure(value * 1e3)} ms" if value < 1 else f"{_figure(value)} s"


def _figure(value: float | None) -> str:
    """Every figure estimate computes, to 3 significant figures (as reports and plans show them)."""
    from ..figures import sig

    return sig(value)


def _flops_lines(plan) -> list[str]:
    from ..plan.flops import llama_generate_flops
    from ..plan.types import InferWorkload, LlamaModel

    w, cost = plan.workload, plan.cost
    if not isinstance(w, InferWorkload):
        per = "image" if w.resolution else f"sequence of {w.seq_len} tokens"
        return [f"{cost.train_flops_per_sample:.3e} per {per}, training (forward + backward = 3 x forward)"]
    if isinstance(plan.model, LlamaModel):
        m = plan.model
        shape = (m.hidden, m.layers, m.heads, m.kv_heads, m.intermediate, m.vocab)
        prefill = llama_generate_flops(*shape, w.input_tokens, 1, head_dim=m.head_dim)
        steps = max(w.output_tokens - 1, 1)
        decode = (cost.forward_flops_per_sample - prefill) / steps
        return [f"prefill {prefill:.3e} per sequence ({w.input_tokens} input tokens); decode "
                f"{decode:.3e} per output token (mean of {w.output_tokens - 1} steps); "
                f"{cost.forward_flops_per_sample:.3e} per sequence in all"]  # fmt: skip
    passes = 2 if w.classifier_free_guidance else 1
    return [f"{cost.forward_flops_per_sample:.3e} per image: the MMDiT over {w.denoising_steps} denoising "
            f"steps x {passes} pass{'es' if passes > 1 else ''} (guidance {w.guidance:g}); text encoders "
            "and VAE not counted"]  # fmt: skip


def _record(plan) -> dict:
    """The estimate of one plan as plain data: what --json prints and the text shows."""
    from ..plan.memory import estimate_memory, parameters
    from ..plan.roofline import judge, roofline

    memory = estimate_memory(plan)
    line = roofline(plan)
    verdicts = [judge(plan, line, ref) for ref in plan.references]
    counts = parameters(plan)
    return {
        "experiment": plan.experiment,
        "target": plan.target.name,
        "point": plan.point,
        "point_values": dict(plan.point_values),
        "smoke": plan.smoke,
        "parameters": counts["transformer"],
        "pipeline_parameters": counts if len(counts) > 1 else None,
        "flops": _flops_lines(plan)[0],
        "forward_flops_per_sample": plan.cost.forward_flops_per_sample,
        "train_flops_per_sample": plan.cost.train_flops_per_sample,
        "memory": {
            "parts": [{"name": p.name, "bytes": p.bytes, "formula": p.formula} for p in memory.parts],
            "total_bytes": memory.total,
            "steady_bytes": memory.steady,
            "build_bytes": memory.build,
            "capacity_bytes": memory.capacity,
            "fits": memory.fits,
            "tight": memory.tight,
            "free_bytes": None if memory.capacity is None else memory.capacity - memory.total,
            "activations_without_checkpointing_bytes": memory.activations_off,
            "activations_with_checkpointing_bytes": memory.activations_on,
            "host_bytes": memory.host,  # the cpu: this host's memory, which its processes share
            "processes": memory.processes,
        },
        "roofline": line.record(),
        "references": [
            {
                "label": v.label,
                "value": v.value,
                "unit": v.unit,
                "per_device": v.per_device,
                "mfu": v.mfu,
                "of_bound": v.of_bound,
                "bandwidth_share": v.bandwidth_share,
                "impossible": v.impossible,
                "arithmetic": v.arithmetic,
            }
            for v in verdicts
        ],  # fmt: skip
    }


def _fit_line(record: dict, target: str) -> str:
    m = record["memory"]
    total = _gb(m["total_bytes"])
    if m["fits"] is None:
        return f"{total} per device; {target} states no memory size: not checked"
    share = m["total_bytes"] / m["capacity_bytes"]
    of, free, over = f"of {_gb(m['capacity_bytes'])} per device", m["free_bytes"], -m["free_bytes"]
    if m["host_bytes"] is not None:  # the cpu: the node's processes share this host's memory
        n = m["processes"]
        total = f"{n} process{'es' if n != 1 else ''} x {total} = {_gb(n * m['total_bytes'])}"
        of, free, over = f"of {_gb(m['host_bytes'])}, this host's memory", n * free, n * over
    if m["fits"]:
        tight = ", tight: little left for the runtime" if m["tight"] else ""
        return f"{total} {of}: fits, {_gb(free)} free ({_figure(share * 100)}% used{tight})"
    return f"{total} {of}: does NOT fit, {_gb(over)} over ({_figure(share)}x the memory)"


def _text(record: dict, plan) -> str:
    point = ", ".join(f"{k}={v}" for k, v in record["point_values"].items()) or "no sweep"
    smoke = "  [smoke]" if record["smoke"] else ""
    lines = [f"{record['experiment']} / {record['target']} / {record['point']}{smoke}",
             f"  point       {point}",
             f"  parameters  {record['parameters']:,}"]  # fmt: skip
    if record["pipeline_parameters"]:
        parts = record["pipeline_parameters"]
        others = ", ".join(f"{k} {v:,}" for k, v in parts.items() if k != "transformer")
        lines[-1] += f" (MMDiT); pipeline {sum(parts.values()):,} with {others}"
    lines.append(f"  FLOPs       {record['flops']}")
    m = record["memory"]
    lines.append(f"  memory      {_fit_line(record, record['target'])}")
    for part in m["parts"]:
        extra = ""
        if part["name"] == "activations" and m["activations_with_checkpointing_bytes"] is not None:
            other = plan.parallel.activation_checkpointing
            value = m[
                "activations_without_checkpointing_bytes" if other else "activations_with_checkpointing_bytes"
            ]
            extra = f" ({'without' if other else 'with'} checkpointing: {_gb(value)})"
        lines.append(f"    {part['name']:<13}{_gb(part['bytes']):>10}  {part['formula']}{extra}")
    if m["build_bytes"]:
        training_plan = plan.workload.kind == "train"
        peak = "  <- the peak" if m["build_bytes"] > m["steady_bytes"] else ""
        lines.append(f"    {'(build)':<13}{_gb(m['build_bytes']):>10}  before the parts above: the whole "
                     f"model built ({'fp32, 4' if training_plan else 'b'} B x P) before it is sharded or "
                     f"split{peak}")  # fmt: skip
    r = record["roofline"]
    training = plan.workload.kind == "train"  # a step: forward+backward, then the optimizer, in turn
    if training:
        parts = " + ".join(f"{phase['name']} {_seconds(phase['seconds'])}" for phase in r["phases"])
        lines.append(f"  roofline    per step: {_seconds(r['seconds'])} = {parts}, one after the other")
    for phase in r["phases"]:
        lines.append(
            f"  roofline    {'' if training else 'per '}{phase['name']}: {_seconds(phase['seconds'])}"
            + (f", {phase['binding']}-bound" if phase["binding"] else ", no bound: figures unknown")
        )
        for bound in phase["bounds"]:
            mark = "  <- binds" if bound["name"] == phase["binding"] else ""
            lines.append(f"    {bound['name']:<13}{_seconds(bound['seconds']):>10}  {bound['detail']}{mark}")
    if r["best"] is None:
        lines.append("  bound       none: the target lacks the figures")
    elif r["lower_is_better"]:
        lines.append(f"  bound       at least {_figure(r['best'])} {r['unit']} ({r['metric']})")
    else:
        lines.append(f"  bound       at most {_figure(r['best'])} {r['unit']} "
                     f"({_figure(r['best_per_device'])} per device; {r['metric']})")  # fmt: skip
    for ref in record["references"]:
        flag = "IMPOSSIBLE: " if ref["impossible"] else ""
        lines.append(
            f'  reference   "{ref["label"]}" {ref["value"]:g} {ref["unit"]}: {flag}{ref["arithmetic"]}'
        )
    return printable("\n".join(lines))


def estimate(args) -> int:
    from .build import plan_args

    result = plan_args(args)
    records = [(_record(plan), plan) for plan in result.plans]
    if args.json:
        payload = {"experiment": result.document.experiment, "estimates": [r for r, _ in records]}
        print(json.dumps(payload, indent=2, sort_keys=True))
    else:
        print("\n\n".join(_text(record, plan) for record, plan in records))
    return EXIT_OK
