"""`benchc estimate`: before any run, per target and sweep point, the parameters, the FLOPs,
the memory per device against the target's, the roofline bounds and the throughput they
allow, and what each published reference implies. A training step's roofline shows its total,
then each phase (forward+backward, the optimizer) with its bounds. Never imports torch.

Where the results store holds a calibration of a plan's target (`benchc calibrate`), the
roofline is also taken against the measured ceilings, and each line gives both figures: the
datasheet's, then the measured one (the cpu target, which states no peak, gets its bound this
way). Without one the text is as it always was; `--json` says "calibration": null.

Generation's decode is bound by memory bandwidth: its line gives the bytes each decode step
moves per device and the least time per step at the HBM bandwidth (and at the measured copy
bandwidth), and each generation reference the bytes/s it implies against both bandwidths.
"""

from __future__ import annotations

import json

from ..diagnostics import printable
from ..figures import finite_json

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
    estimate_.add_argument(
        "--db", metavar="PATH",
        help="results store whose calibrations add measured ceilings (default: $BENCHC_RESULTS or "
        ".benchc/results.db)",
    )  # fmt: skip


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
    from ..plan.flops import causal_lm_generate_flops
    from ..plan.types import CausalLM, InferWorkload

    w, cost = plan.workload, plan.cost
    if not isinstance(w, InferWorkload):
        per = "image" if w.resolution else f"sequence of {w.seq_len} tokens"
        line = f"{cost.train_flops_per_sample:.3e} per {per}, training (forward + backward = 3 x forward)"
        if w.seq_len:
            line += f"; {cost.train_flops_per_sample / w.seq_len:.3e} per token"
        return [line]
    if isinstance(plan.model, CausalLM):
        m = plan.model
        prefill = causal_lm_generate_flops(m.census, w.input_tokens, 1)
        steps = max(w.output_tokens - 1, 1)
        decode = (cost.forward_flops_per_sample - prefill) / steps
        return [f"prefill {prefill:.3e} per sequence ({w.input_tokens} input tokens); decode "
                f"{decode:.3e} per output token (mean of {w.output_tokens - 1} steps); "
                f"{cost.forward_flops_per_sample:.3e} per sequence in all"]  # fmt: skip
    passes = 2 if w.classifier_free_guidance else 1
    what = "the MMDiT" if plan.model.kind == "sd3" else "the Flux transformer"
    guidance = "no guidance" if w.guidance is None else f"guidance {w.guidance:g}"
    return [f"{cost.forward_flops_per_sample:.3e} per image: {what} over {w.denoising_steps} denoising "
            f"steps x {passes} pass{'es' if passes > 1 else ''} ({guidance}); text encoders "
            "and VAE not counted"]  # fmt: skip


def _active_parameters(plan) -> int | None:
    """A mixture of experts' parameters one token uses; None for a dense model."""
    from ..plan.types import CausalLM

    if not isinstance(plan.model, CausalLM) or not plan.model.experts:
        return None
    return plan.model.census.active_params


def _decode_record(plan, line) -> dict | None:
    """Generation's decode as memory traffic: the bytes each decode step moves per device (the
    roofline's decode memory bound over its steps), how the cache is read, and the least time
    per step at the datasheet's HBM bandwidth (None: no decode step, or not generation)."""
    from ..plan.roofline import kv_bucket
    from ..plan.types import CausalLM, InferWorkload

    if not isinstance(plan.workload, InferWorkload) or not isinstance(plan.model, CausalLM):
        return None
    decode = next((p for p in line.phases if p.name == "decode"), None)
    if decode is None:
        return None
    memory = next(b for b in decode.bounds if b.name == "memory")
    steps = plan.workload.output_tokens - 1
    hbm = plan.target.hbm_tb_s
    return {
        "steps": steps,
        "bytes_per_device": memory.amount,
        "bytes_per_step": memory.amount / steps,
        "kv_bucket": kv_bucket(plan),  # keys read: rounded up to it; 1 the filled ones; None the whole cache
        "hbm_bytes_per_s": None if hbm is None else hbm * 1e12,
        "seconds_per_step": None if hbm is None else memory.amount / steps / (hbm * 1e12),
    }


def _decode_line(record: dict, target: str) -> str:
    from ..plan.roofline import key_rule_of

    d = record["decode"]
    text = (f"  decode      {_gb(d['bytes_per_step'])} moved per step per device (the weights, the KV "
            f"cache read {key_rule_of(d['kv_bucket'])}); ")  # fmt: skip
    if d["hbm_bytes_per_s"] is None:
        return text + f"{target} states no HBM bandwidth"
    return text + (f"at the {_figure(d['hbm_bytes_per_s'] / 1e12)} TB/s HBM bandwidth at least "
                   f"{_seconds(d['seconds_per_step'])} per step")  # fmt: skip


def _calibration_json(plan, calibration) -> dict | None:
    """The calibration used, with the roofline against its ceilings (None: none stored)."""
    from ..plan.roofline import roofline
    from ..report.ceilings import calibration_json, collectives_apply, measured_ceilings

    if calibration is None:
        return None
    measured = roofline(plan, measured_ceilings(calibration, plan))
    return {**calibration_json(calibration), "roofline": measured.record(),
            "collectives_used": collectives_apply(calibration, plan)}  # fmt: skip


def _record(plan, calibration=None) -> dict:
    """The estimate of one plan as plain data: what --json prints and the text shows; with the
    roofline against the measured ceilings of `calibration` where one is stored."""
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
        "active_parameters": _active_parameters(plan),
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
        "decode": _decode_record(plan, line),
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
                "bytes_per_s": v.bytes_per_s,
            }
            for v in verdicts
        ],  # fmt: skip
        "calibration": _calibration_json(plan, calibration),
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


def _measured_bound(line) -> str:
    """The bound line's measured part: what the measured ceilings allow."""
    if line.best is None:
        return "at the measured ceilings: none (the calibration lacks the figures)"
    if line.lower_is_better:
        return f"at the measured ceilings at least {_figure(line.best)} {line.unit}"
    return (f"at the measured ceilings at most {_figure(line.best)} {line.unit} "
            f"({_figure(line.best / line.world)} per device)")  # fmt: skip


def _with_measured(lines: list[str], record: dict, measured) -> list[str]:
    """The roofline and bound lines of `lines` with the measured figure after the datasheet's,
    and the line that says where the measured ceilings come from."""
    from ..report.ceilings import source

    calibration = record["calibration"]
    figures = [f"{p} {_figure(v)} TFLOP/s" for p, v in sorted(calibration["matmul_tflops"].items())]
    if calibration["memory_tb_s"] is not None:
        figures.append(f"memory {_figure(calibration['memory_tb_s'])} TB/s")
    if measured.collectives_apply:
        figures += [f"{k} {_figure(v)} GB/s bus" for k, v in sorted(calibration["bus_gb_s"].items())]
    elif calibration["bus_gb_s"]:
        ran_on = measured.calibration.layout()
        figures.append(f"its collectives ran on {ran_on} (nodes x processes), not this plan's layout: "
                       "the links are the datasheet's")  # fmt: skip
    provenance = (f"  calibration measured ceilings ({source(measured.calibration)}): {', '.join(figures)}; "
                  "each roofline line gives the datasheet's figure, then the measured one")  # fmt: skip
    out, phase_index, bounds = [], -1, iter(())
    references = iter(record["references"])  # in the order of their lines
    for text in lines:
        if text.startswith("  roofline    ") and provenance:
            out.append(provenance)
            provenance = ""
        if text.startswith("  roofline    per step: "):
            text += f"; measured: {_seconds(measured.line.seconds)}"
        elif text.startswith("  roofline    "):
            phase_index += 1
            phase = measured.line.phases[phase_index]
            bounds = iter(phase.bounds)
            binding = f", {phase.binding.name}-bound" if phase.binding else ", no bound"
            text += f"; measured: {_seconds(phase.seconds)}{binding}"
        elif text.startswith("    ") and phase_index >= 0 and not text.startswith("    ("):
            bound = next(bounds, None)
            if bound is not None:
                binds = " (binds)" if bound is measured.line.phases[phase_index].binding else ""
                at = f" at {bound.ceiling}" if bound.ceiling else f" ({bound.detail})"
                text += f"; measured {_seconds(bound.seconds)}{at}{binds}"
        elif text.startswith("  bound       "):
            text += f"; {_measured_bound(measured.line)}"
        elif text.startswith("  decode      ") and calibration["memory_tb_s"]:
            per_step = record["decode"]["bytes_per_step"] / (calibration["memory_tb_s"] * 1e12)
            text += (f"; measured: at the {_figure(calibration['memory_tb_s'])} TB/s copy bandwidth at least "
                     f"{_seconds(per_step)} per step")  # fmt: skip
        elif text.startswith("  reference   ") and calibration["memory_tb_s"]:
            moved = next(references, {}).get("bytes_per_s")
            if moved is not None:
                copy = calibration["memory_tb_s"]
                share = _figure(moved / (copy * 1e12) * 100)
                text += f"; {share}% of the measured {_figure(copy)} TB/s copy bandwidth"
        out.append(text)
    return out


def _text(record: dict, plan, measured=None) -> str:
    from ..plan.memory import build_formula

    point = ", ".join(f"{k}={v}" for k, v in record["point_values"].items()) or "no sweep"
    smoke = "  [smoke]" if record["smoke"] else ""
    lines = [f"{record['experiment']} / {record['target']} / {record['point']}{smoke}",
             f"  point       {point}",
             f"  parameters  {record['parameters']:,}"]  # fmt: skip
    if record["active_parameters"] is not None:
        m = plan.model
        active = f"{record['active_parameters']:,} active per token"
        lines[-1] += (f" in all; {active} ({m.experts_per_token} of {m.experts} experts per layer, and the "
                      "router): FLOPs count the active ones")  # fmt: skip
    if record["pipeline_parameters"]:
        parts = record["pipeline_parameters"]
        others = ", ".join(f"{k} {v:,}" for k, v in parts.items() if k != "transformer")
        what = "MMDiT" if "clip_g" in parts else "Flux transformer"
        lines[-1] += f" ({what}); pipeline {sum(parts.values()):,} with {others}"
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
        peak = "  <- the peak" if m["build_bytes"] > m["steady_bytes"] else ""
        lines.append(f"    {'(build)':<13}{_gb(m['build_bytes']):>10}  before the parts above: the whole "
                     f"model built ({build_formula(plan)}) before it is sharded or split{peak}")  # fmt: skip
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
    if record["decode"] is not None:
        lines.append(_decode_line(record, record["target"]))
    for ref in record["references"]:
        flag = "IMPOSSIBLE: " if ref["impossible"] else ""
        lines.append(
            f'  reference   "{ref["label"]}" {ref["value"]:g} {ref["unit"]}: {flag}{ref["arithmetic"]}'
        )
    if measured is not None:
        lines = _with_measured(lines, record, measured)
    return printable("\n".join(lines))


class _Measured:
    """A plan's roofline against the measured ceilings, with the calibration they came from."""

    def __init__(self, plan, calibration) -> None:
        from ..plan.roofline import roofline
        from ..report.ceilings import collectives_apply, measured_ceilings

        self.calibration = calibration
        self.line = roofline(plan, measured_ceilings(calibration, plan))
        self.collectives_apply = collectives_apply(calibration, plan)


def _calibrations(db) -> dict:
    """target -> its usable calibrations in the store (none where there is no store)."""
    from ..results.calibrations import usable_calibrations
    from ..results.store import open_existing

    store = open_existing(db or None)
    if store is None:
        return {}
    with store:
        return usable_calibrations(store)


def _calibration_of(plan, calibrations: dict):
    """The calibration for `plan`: one of its layout where the store holds one."""
    from ..results.calibrations import calibration_for

    found = calibrations.get(plan.target.name)
    if not found:
        return None
    dims = plan.dims
    return calibration_for(found, dims.nodes, dims.devices_per_node, plan.target.family)


def estimate(args) -> int:
    from .build import plan_args

    result = plan_args(args)
    calibrations = _calibrations(getattr(args, "db", None))
    records = [(_record(plan, _calibration_of(plan, calibrations)), plan) for plan in result.plans]
    if args.json:
        payload = {"experiment": result.document.experiment, "estimates": [r for r, _ in records]}
        print(json.dumps(finite_json(payload), indent=2, sort_keys=True, allow_nan=False))
    else:
        texts = []
        for record, plan in records:
            calibration = _calibration_of(plan, calibrations)
            texts.append(_text(record, plan, _Measured(plan, calibration) if calibration else None))
        print("\n\n".join(texts))
    return EXIT_OK
