"""A plan as a short human-readable block for `benchc plan` (the JSON form is Plan.to_dict)."""

from __future__ import annotations

from ..diagnostics import printable
from .roofline import kv_bucket
from .types import CausalLM, FluxModel, FluxPipeline, InferWorkload, Plan, SD3Pipeline


def _model_line(plan: Plan) -> str:
    model = plan.model
    if isinstance(model, CausalLM):
        name = f"{model.model_type} ({model.preset})" if model.preset else model.model_type
        text = (
            f"{name}: hidden {model.hidden}, {model.layers} layers, "
            f"{model.heads} heads ({model.kv_heads} KV, head dim {model.head_dim}), "
            f"intermediate {model.intermediate}, vocab {model.vocab}"
        )
        if model.experts:
            text += f", {model.experts} experts ({model.experts_per_token} per token)"
        if model.sliding_window:
            text += f", sliding window {model.sliding_window}"
        return text + (", tied embeddings" if model.tie_embeddings else "")
    if isinstance(model, FluxModel | FluxPipeline):
        t = model.transformer if isinstance(model, FluxPipeline) else model
        text = (
            f"Flux{' (' + t.preset + ')' if t.preset else ''}: {t.depth} double-stream + "
            f"{t.single_depth} single-stream blocks, hidden {t.hidden}, {t.heads} heads x "
            f"{t.head_dim}, guidance {'embedded' if t.guidance else 'none'}, {t.text_tokens} text tokens"
        )
        return f"Flux pipeline (CLIP-L, T5 + VAE), {text}" if isinstance(model, FluxPipeline) else text
    transformer = model.transformer if isinstance(model, SD3Pipeline) else model
    text = (
        f"MMDiT d{transformer.depth}{' (' + transformer.preset + ')' if transformer.preset else ''}: "
        f"hidden {transformer.hidden}, {transformer.heads} heads x {transformer.head_dim}, "
        f"patch {transformer.patch}, qk_norm {transformer.qk_norm}"
    )
    if isinstance(model, SD3Pipeline):
        text = f"SD3 pipeline ({', '.join(model.text_encoders)} + VAE), {text}"
    return text


def _workload_line(plan: Plan) -> str:
    w = plan.workload
    if isinstance(w, InferWorkload):
        parts = [f"infer {w.precision}, attention {w.attention}, batch {w.batch}"]
        if w.resolution:
            parts.append(
                f"{w.resolution}x{w.resolution} ({w.image_tokens} image tokens), "
                f"{w.denoising_steps} denoising steps, "
                + ("no guidance" if w.guidance is None else f"guidance {w.guidance:g}")
                + f" (CFG {'on' if w.classifier_free_guidance else 'off'})"
            )
        if w.input_tokens:
            parts.append(f"{w.input_tokens} in -> {w.output_tokens} out tokens, {w.kv_cache} KV cache")
        parts.append(f"{w.steps} iterations ({w.warmup} warmup)")
        return "; ".join(parts)
    shape = (
        f"{w.resolution}x{w.resolution} ({w.image_tokens} image tokens)"
        if w.resolution
        else f"seq_len {w.seq_len}"
    )
    args = ", ".join(f"{k}={v}" for k, v in w.optimizer.args.items())
    return (
        f"train {w.precision}, attention {w.attention}, {w.objective}, {shape}; "
        f"batch {w.micro_batch}/device x accum {w.grad_accum} x data {plan.parallel.data} = "
        f"global {w.global_batch}; {w.optimizer.name}({args}); "
        f"{w.steps} steps ({w.warmup} warmup)"
    )


def _decode_line(plan: Plan) -> str | None:
    """Generation: how much of the KV cache each step's attention reads (plan/roofline.py)."""
    if not isinstance(plan.workload, InferWorkload) or not isinstance(plan.model, CausalLM):
        return None
    bucket = kv_bucket(plan)
    if bucket is None:
        who = ("optimum-habana's generate, padded to the full length" if plan.target.family == "hpu"
               else "transformers' generate")  # fmt: skip
        return f"attention reads the whole static cache every step ({who})"
    if bucket == 1:
        return "attention reads the filled keys of its dynamic cache"
    if plan.tuning is not None and plan.tuning.decode == "loop":
        compiled = plan.tuning.compile != "off"
        symbolic = ", its step compiled with the bucket's length symbolic"
        by = "benchc's decode loop" + (symbolic if compiled else "")
    else:
        by = "optimum-habana's generate, bucket_internal"
    return f"attention reads the KV cache up to the filled length rounded up to {bucket} keys ({by})"


def _cost_line(plan: Plan) -> str:
    """Parameters and model FLOPs per sample (what MFU divides by the peak)."""
    cost = plan.cost
    if isinstance(plan.workload, InferWorkload):
        w = plan.workload
        what = "Flux transformer" if isinstance(plan.model, FluxPipeline) else "MMDiT"
        per = (f"image (the {what} over every denoising step; encoders and VAE not counted)"
               if isinstance(plan.model, SD3Pipeline | FluxPipeline)
               else f"sequence (prefill of {w.input_tokens} + {w.output_tokens} decode steps)")  # fmt: skip
        flops = f"{cost.forward_flops_per_sample:.3e} FLOPs per {per}"
    else:
        per = "image" if plan.workload.resolution else f"sequence of {plan.workload.seq_len} tokens"
        flops = f"{cost.train_flops_per_sample:.3e} training FLOPs per {per} (forward + backward)"
    return f"{cost.params:,} parameters; {flops}"


def summarize(plan: Plan) -> str:
    t, c, p = plan.target, plan.cluster, plan.parallel
    point = ", ".join(f"{k}={v}" for k, v in plan.point_values) or "no sweep"
    lines = [
        f"{plan.experiment} / {t.name} / {plan.point}{'  [smoke]' if plan.smoke else ''}",
        f"  point     {point}",
        f"  target    {t.device_name} ({t.family}, {t.distributed_backend})",
        f"  model     {_model_line(plan)}",
        f"  workload  {_workload_line(plan)}",
        f"  cluster   {c.nodes} node(s) x {c.devices_per_node} = world size {c.world_size}",
        f"  parallel  data {p.data} x tensor {p.tensor} x pipeline {p.pipeline}, "
        f"sharding {p.sharding}, activation checkpointing {'on' if p.activation_checkpointing else 'off'}",
        f"  measure   {plan.measure.metric}, repeat {plan.measure.repeat}"
        f"{', profiled after the measured steps' if plan.measure.profile else ''}",
    ]
    decode = _decode_line(plan)
    if decode is not None:
        lines.insert(5, f"  decode    {decode}")
    if plan.cost is not None:
        lines.insert(5, f"  cost      {_cost_line(plan)}")
    if plan.tuning is not None:
        lines.insert(-1, f"  optimize  {plan.tuning.describe()}")
    if plan.runtime != "torch":
        lines.insert(-1, f"  runtime   {plan.runtime} (the training step driven by its Accelerator)")
    if plan.checkpoint is not None:
        how = ("checked by the program before it runs the tiny model (random weights)" if plan.smoke
               else "shape from its config, tensors checked; loaded by the program")  # fmt: skip
        lines.insert(5, f"  weights   {_one_line(plan.checkpoint)} ({how})")
    if plan.description:
        lines.insert(1, f"  about     {_one_line(plan.description)}")
    for ref in plan.references:
        source = f"; {_one_line(ref.source)}" if ref.source else ""
        lines.append(f"  reference {ref.value:g} {_one_line(ref.unit)} ({_one_line(ref.label)}{source})")
    return "\n".join(lines)


def _one_line(text: str) -> str:
    """A spec's own text on one line of the plan: newlines, tabs and other control characters
    (an escape sequence could rewrite the terminal) shown as escapes."""
    return printable(text.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r"))
