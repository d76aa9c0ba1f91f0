"""Layer 2 of validation: the rules that tie settings together, each stating the rule it enforces.

Each rule reads a built Plan (values resolved, derived values computed) and the variant's
settings (for spans), and returns located diagnostics. `check_plan` runs them all, so one
`benchc check` reports every broken rule at once. The parallel layout's derived facts (world
size, the product of the degrees) are read from plan.dims (plan/parallel.py), which asserts
only what a bug could break: a spec's inconsistent degrees are reported here, located. The
module is over 400 lines because it is the one registry of cross-field rules, each short and
independent; splitting it would only scatter them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..catalog.targets import TARGETS
from ..diagnostics import Diagnostic, Span, choices_hint
from ..plan.lower import METRICS, OBJECTIVES, PLAN_KIND, Resolved
from ..plan.types import CausalLM, FluxModel, FluxPipeline, InferWorkload, Plan, SD3Pipeline, TrainWorkload
from .capabilities import check_capabilities
from .families import check_families
from .schema import setting_names

Rule = Callable[[Plan, Resolved], Iterator[Diagnostic]]
RULES: list[Rule] = []


def rule(function: Rule) -> Rule:
    RULES.append(function)
    return function


def check_plan(plan: Plan, resolved: Resolved) -> list[Diagnostic]:
    found = []
    for check in RULES:
        found.extend(check(plan, resolved))
    return found + check_capabilities(plan, resolved) + check_families(plan, resolved)


def _span(resolved: Resolved, *path, key: bool = False) -> Span:
    return resolved.settings.span(tuple(path), prefer_key=key)


def _workload(plan: Plan) -> str:
    return plan.workload.kind


@rule
def world_size(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """nodes x devices_per_node = world size = data x tensor x pipeline."""
    d = plan.dims
    if d.fills_world:
        return
    written = r.settings.has(("parallel", "data"))
    at = _span(r, "parallel", "data") if written else _span(r, "parallel", key=True)
    if not r.settings.has(("parallel",)):
        at = _span(r, "cluster", key=True)
    if not written and d.world_size % (d.tensor * d.pipeline):
        message = (
            f"world size {d.world_size} (nodes {d.nodes} x devices_per_node "
            f"{d.devices_per_node}) is not divisible by tensor x pipeline = "
            f"{d.tensor} x {d.pipeline}"
        )
    else:
        message = (
            f"parallel degrees do not fill the cluster: data x tensor x pipeline = "
            f"{d.data} x {d.tensor} x {d.pipeline} = {d.degrees}, but nodes x devices_per_node = "
            f"{d.nodes} x {d.devices_per_node} = {d.world_size}"
        )
    yield Diagnostic(
        message,
        at,
        hint="rule: nodes x devices_per_node = world size = data x tensor x pipeline"
        + (f"; with this cluster, data = {d.world_size // (d.tensor * d.pipeline)}"
           if d.world_size % (d.tensor * d.pipeline) == 0 else ""),
    )  # fmt: skip


@rule
def global_batch(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """global batch = micro batch x gradient accumulation x data degree."""
    w = plan.workload
    if not isinstance(w, TrainWorkload):
        return
    expected = w.micro_batch * w.grad_accum * plan.dims.data
    if w.global_batch == expected:
        return
    accum_written = r.settings.has(("train", "grad_accum"))
    data = plan.dims.data
    hint = "rule: global_batch = batch x grad_accum x parallel.data"
    if not accum_written and w.global_batch % (w.micro_batch * data):
        message = (
            f"global_batch {w.global_batch} is not a multiple of batch x data = "
            f"{w.micro_batch} x {data} = {w.micro_batch * data}"
        )
    else:
        message = (
            f"batch arithmetic does not add up: batch x grad_accum x data = {w.micro_batch} x "
            f"{w.grad_accum} x {data} = {expected}, but global_batch = {w.global_batch}"
        )
        if w.global_batch % (w.micro_batch * data) == 0:
            hint += f"; grad_accum = {w.global_batch // (w.micro_batch * data)} would add up"
    yield Diagnostic(message, _span(r, "train", "global_batch"), hint=hint)


@rule
def heads_divide(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """Attention heads (and KV heads) are split evenly across the tensor-parallel degree."""
    tensor = plan.dims.tensor
    model = _transformer(plan)
    kind = r.model_kind
    counts = [("heads", model.heads)]
    if isinstance(model, CausalLM):
        counts.append(("kv_heads", model.kv_heads))
    at = _span(r, "parallel", "tensor")
    for name, count in counts:
        if count % tensor:
            yield Diagnostic(
                f"parallel.tensor = {tensor} does not divide the model's {name} ({count})",
                at,
                hint=f"rule: {name} % tensor == 0; tensor degrees that work: "
                + ", ".join(str(d) for d in range(1, count + 1) if count % d == 0 and d <= 64),
                notes=(),
            )
    if isinstance(model, CausalLM):
        if model.hidden % model.heads and r.model.get("head_dim") is None:
            yield Diagnostic(
                f"{kind} hidden ({model.hidden}) is not divisible by heads ({model.heads})",
                _span(r, "model", kind, "hidden"),
                hint="rule: head_dim = hidden / heads must be a whole number (or set head_dim)",
            )
        if model.heads % model.kv_heads:
            yield Diagnostic(
                f"{kind} heads ({model.heads}) is not a multiple of kv_heads ({model.kv_heads})",
                _span(r, "model", kind, "kv_heads"),
                hint="rule: grouped-query attention shares each KV head among heads / kv_heads query heads",
            )


@rule
def llama_head_dim_even(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """A Llama's head_dim is even: rotary position embeddings turn pairs of its dimensions."""
    model = plan.model
    if not isinstance(model, CausalLM) or model.head_dim % 2 == 0:
        return
    written = r.model.get("head_dim") is not None
    at = _span(r, "model", r.model_kind, "head_dim" if written else "heads")
    how = "" if written else f" (hidden / heads = {model.hidden} / {model.heads})"
    yield Diagnostic(
        f"{r.model_kind} head_dim{how} is {model.head_dim}, an odd number",
        at,
        hint="rule: head_dim % 2 == 0: rotary position embeddings rotate pairs of dimensions",
    )


@rule
def warmup_before_steps(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """warmup < steps: at least one step is timed."""
    w = plan.workload
    if w.warmup >= w.steps:
        yield Diagnostic(
            f"warmup ({w.warmup}) must be less than steps ({w.steps})",
            _span(r, w.kind, "warmup"),
            hint="rule: warmup < steps; steps count the warmup, and only steps after it are "
            f"timed (e.g. steps = {w.warmup + 20})",
        )


def _transformer(plan: Plan):
    """The model, or the transformer of a pipeline."""
    return plan.model.transformer if isinstance(plan.model, SD3Pipeline | FluxPipeline) else plan.model


@rule
def image_shape(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """resolution divides into VAE latents (/8) and those into patches; patches fit pos_embed."""
    w = plan.workload
    if w.resolution is None:
        return
    model = _transformer(plan)
    step = 8 * model.patch
    if w.resolution % step:
        yield Diagnostic(
            f"{w.kind}.resolution {w.resolution} is not a multiple of {step}",
            _span(r, w.kind, "resolution"),
            hint=f"rule: resolution / 8 (VAE) / patch ({model.patch}) must be whole; "
            f"e.g. {w.resolution - w.resolution % step or step}",
        )
    elif not isinstance(model, FluxModel) and w.resolution // step > model.pos_embed_max_size:
        yield Diagnostic(
            f"{w.kind}.resolution {w.resolution} gives {w.resolution // step} patches per side, "
            f"more than pos_embed_max_size ({model.pos_embed_max_size})",
            _span(r, w.kind, "resolution"),
            hint="rule: resolution / 8 / patch <= pos_embed_max_size",
        )


@rule
def sequence_fits(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """Token counts fit the model's position table."""
    model, w = plan.model, plan.workload
    if not isinstance(model, CausalLM):
        return
    if isinstance(w, TrainWorkload) and w.seq_len and w.seq_len > model.max_positions:
        yield Diagnostic(
            f"train.seq_len {w.seq_len} exceeds the model's max_positions ({model.max_positions})",
            _span(r, "train", "seq_len"),
            hint="rule: seq_len <= max_positions",
        )
    if isinstance(w, InferWorkload) and w.input_tokens and w.output_tokens:
        total = w.input_tokens + w.output_tokens
        if total > model.max_positions:
            yield Diagnostic(
                f"input_tokens + output_tokens = {total} exceeds the model's max_positions "
                f"({model.max_positions})",
                _span(r, "infer", "output_tokens"),
                hint="rule: input_tokens + output_tokens <= max_positions",
            )


@rule
def target_capabilities(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """The target runs the precision and attention kernel the spec asks for (target table)."""
    t, w = plan.target, plan.workload
    if w.precision not in t.precisions:
        reason = t.unsupported_precisions.get(w.precision, "")
        yield Diagnostic(
            f"target {t.name} cannot run {w.kind}.precision = {w.precision}",
            _span(r, w.kind, "precision"),
            hint=reason or f"{t.name} supports: {', '.join(t.precisions)}",
        )
    if w.attention not in t.attention:
        reason = t.unsupported_attention.get(w.attention, "")
        yield Diagnostic(
            f"target {t.name} has no '{w.attention}' attention kernel",
            _span(r, w.kind, "attention"),
            hint=reason or f"{t.name} kernels: {', '.join(t.attention)}",
        )
    allowed = t.attention_precisions.get(w.attention)
    if allowed and w.precision not in allowed and w.precision in t.precisions:
        yield Diagnostic(
            f"attention = {w.attention} on {t.name} runs only in {' or '.join(allowed)}, not {w.precision}",
            _span(r, w.kind, "attention"),
            hint=f"PyTorch's flash-attention kernels have no {w.precision} variant; write "
            f"attention = sdpa or precision = {allowed[0]}",
        )
    limit = t.devices_per_node
    if limit is not None and plan.cluster.devices_per_node > limit:
        yield Diagnostic(
            f"{t.name} nodes have {limit} devices, not {plan.cluster.devices_per_node}",
            _span(r, "cluster", "devices_per_node"),
            hint=f"rule: devices_per_node <= {limit} on {t.name}; add nodes instead",
        )


@rule
def model_shapes(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """MMDiT: the caption projection is as wide as the hidden size (diffusers adds the two)."""
    model = _transformer(plan)
    if isinstance(model, CausalLM | FluxModel) or model.caption_projection_dim == model.hidden:
        return
    yield Diagnostic(
        f"caption_projection_dim ({model.caption_projection_dim}) must equal the hidden size "
        f"heads x head_dim = {model.heads} x {model.head_dim} = {model.hidden}",
        _span(r, "model", r.model_kind, "caption_projection_dim"),
        hint="rule: caption_projection_dim = heads x head_dim; leave it out to derive it",
    )


@rule
def objective_and_metric(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """The objective is the model's own, and the metric is one this workload measures."""
    w = plan.workload
    if isinstance(w, TrainWorkload) and w.objective != OBJECTIVES[plan.model.kind]:
        yield Diagnostic(
            f"objective {w.objective} does not train a {plan.model.kind} model",
            _span(r, "train", "objective"),
            hint=f"{plan.model.kind} trains with {OBJECTIVES[plan.model.kind]}",
        )
    allowed = METRICS[(w.kind, PLAN_KIND.get(r.model_kind, r.model_kind))]
    if plan.measure.metric not in allowed:
        yield Diagnostic(
            f"metric {plan.measure.metric} is not measured by {plan.model.kind} {w.kind}",
            _span(r, "measure", "metric"),
            hint=f"metrics of this workload: {', '.join(allowed)}",
        )
    elif plan.measure.metric == "tpot_s" and isinstance(w, InferWorkload) and (w.output_tokens or 0) < 2:
        yield Diagnostic(
            f"metric tpot_s needs at least 2 output tokens; infer.output_tokens = {w.output_tokens}",
            _span(r, "measure", "metric"),
            hint="time per output token is measured over the tokens after the first: raise "
            "infer.output_tokens, or measure ttft_s",
        )


@rule
def workload_options(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """Training-only settings are not set for inference."""
    p = plan.parallel
    if isinstance(plan.workload, InferWorkload):
        if p.sharding != "none":
            yield Diagnostic(
                f"parallel.sharding = {p.sharding} applies to training",
                _span(r, "parallel", "sharding"),
                hint="for inference split the model with parallel.tensor instead",
            )
        if p.activation_checkpointing:
            yield Diagnostic(
                "parallel.activation_checkpointing applies to training",
                _span(r, "parallel", "activation_checkpointing"),
                hint="remove it; inference keeps no activations for a backward pass",
            )


@rule
def slurm_log_inside_the_build(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """The job's log file stays inside its build point (no `..` in slurm.log), in a folder
    compile can make (no % pattern in it)."""
    if ".." in plan.slurm.log.split("/"):
        yield Diagnostic(
            f'slurm.log must stay inside the build point, not "{plan.slurm.log}"',
            _span(r, "slurm", "log"),
            hint='rule: a relative path without "..", e.g. "logs/slurm-%j.out"',
        )
    elif "%" in plan.slurm.log.rpartition("/")[0]:
        yield Diagnostic(
            f'slurm.log\'s folder cannot hold a % pattern: "{plan.slurm.log}"',
            _span(r, "slurm", "log"),
            hint="compile makes the log's folder (Slurm creates none), so it must be a fixed name; "
            'put the pattern in the file name, e.g. "logs/slurm-%j.out"',
        )


@rule
def weights_path_printable(plan: Plan, r: Resolved) -> Iterator[Diagnostic]:
    """A weights path holds no control character (a NUL cuts it short in every system call;
    a newline or an escape sequence misleads whoever reads it)."""
    weights = getattr(plan.model, "weights", None)
    bad = next((c for c in weights or "" if ord(c) < 32 or 127 <= ord(c) < 160), None)
    if bad is not None:
        yield Diagnostic(
            f"the weights path holds a control character (U+{ord(bad):04X})",
            _span(r, "model", r.model_kind, "weights"),
            hint="write the folder's path as it is on disk; no path holds control characters",
        )


MAX_EXPERIMENT_CHARS = 100


def check_names(document) -> list[Diagnostic]:
    """Target names, which the schema cannot know: in targets, on, prices and reference blocks."""
    found = []
    if len(document.experiment) > MAX_EXPERIMENT_CHARS:  # it names a build folder and results
        found.append(
            Diagnostic(
                f"experiment name is {len(document.experiment)} characters long; the limit is "
                f"{MAX_EXPERIMENT_CHARS}",
                document.experiment_span,
                hint="the name becomes a folder of the build and a key of the results store",
            )
        )
    known = list(TARGETS)
    targets = document.get(("targets",))
    for index, name in enumerate(targets if isinstance(targets, list) else []):
        if isinstance(name, str) and name not in TARGETS:
            found.append(
                Diagnostic(
                    f"unknown target '{name}'",
                    document.span_of(("targets", index)),
                    hint=choices_hint(name, known, "known targets (benchc targets)"),
                )
            )
    on = document.get(("on",))
    for name in on if isinstance(on, dict) else {}:
        if name not in TARGETS:
            found.append(
                Diagnostic(
                    f"unknown target '{name}' in on {name} {{ }}",
                    document.span_of(("on", name), prefer_key=True),
                    hint=choices_hint(name, known, "known targets"),
                )
            )
    prices = document.get(("prices", "per_device_hour"))
    for name in prices if isinstance(prices, dict) else {}:
        if name not in TARGETS:
            found.append(
                Diagnostic(
                    f"unknown target '{name}' in prices",
                    document.span_of(("prices", "per_device_hour", name), prefer_key=True),
                    hint=choices_hint(name, known, "known targets"),
                )
            )
    references = document.get(("reference",))
    for label, ref in (references if isinstance(references, dict) else {}).items():
        found += _check_where(document, label, ref.get("where") if isinstance(ref, dict) else None)
        name = ref.get("target") if isinstance(ref, dict) else None
        if isinstance(name, str) and name not in TARGETS:
            found.append(
                Diagnostic(
                    f"unknown target '{name}' in reference \"{label}\"",
                    document.span_of(("reference", label, "target")),
                    hint=choices_hint(name, known, "known targets"),
                )
            )
    return found


def _check_where(document, label: str, where, prefix: tuple = ()) -> list[Diagnostic]:
    """`where { train.batch = 16 }` names settings that exist, or the figure would never match."""
    if not isinstance(where, dict):
        return []
    found = []
    for key, value in where.items():
        path = prefix + (key,)
        allowed = setting_names(prefix) if prefix else setting_names(())
        if allowed is None or key not in allowed:
            found.append(
                Diagnostic(
                    f"reference \"{label}\": unknown setting '{'.'.join(path)}' in where",
                    document.span_of(("reference", label, "where") + path, prefer_key=True),
                    hint=choices_hint(key, allowed or [], "settings here"),
                )
            )
        elif isinstance(value, dict) and setting_names(path):
            found += _check_where(document, label, value, path)
    return found
