"""Lower one variant's settings to a typed Plan: defaults, presets, derived values.

Two steps, so `--smoke` can shrink in between: `resolve()` fills every setting (defaults,
presets) into plain sections; `build()` computes derived values and freezes them into a Plan.
Mistakes that stop a plan from being built (unknown preset, no workload, settings that do not
apply to the model) are located errors here; cross-field rules live in validate/semantic.py.
The parallel layout's facts are derived once, on the plan (plan/parallel.py, `plan.dims`).

It is over 400 lines because its tables (DEFAULTS, MODEL_DEFAULTS, WORKLOAD_FIELDS) are the one
statement of every default and of which setting applies to which model, and they belong with
the code that applies them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..catalog.metrics import metrics_of
from ..catalog.presets import PRESETS
from ..catalog.sd3_components import CLIP_TOKENS
from ..catalog.targets import Target
from ..diagnostics import BenchError, Diagnostic, choices_hint
from ..frontend.document import Document
from .causal_lm import build_causal_lm, resolve_causal_lm
from .flops import ModelCost, causal_lm_cost, causal_lm_generate_flops, flux_cost, mmdit_cost
from .flux import build_flux, check_flux
from .tuning import DEFAULT_TIER
from .tuning import derive as derive_tuning
from .types import (
    CausalLM,
    Cluster,
    FluxModel,
    FluxPipeline,
    InferWorkload,
    Measure,
    MMDiTModel,
    Optimizer,
    Parallel,
    Plan,
    PriceList,
    Reference,
    SD3Pipeline,
    Slurm,
    SpecInfo,
    TrainWorkload,
)
from .variants import Settings, Variant
from .weights import resolve_weights

VAE_DOWNSAMPLING = 8
# Generation with a static KV cache reads keys up to the filled length rounded up to a bucket
# (InferWorkload.decode_bucket): 128 as optimum-habana's generate; a smoke run's 16 + 32 tokens
# span several buckets of 16, so the CPU runs the bucketed path with more than one graph.
DECODE_BUCKET = 128
SMOKE_DECODE_BUCKET = 16

DEFAULTS = {
    "cluster": {"nodes": 1, "devices_per_node": 1},
    "parallel": {
        "data": None,  # derived: world size / (tensor * pipeline)
        "tensor": 1,
        "pipeline": 1,
        "sharding": "none",
        "activation_checkpointing": False,
    },
    "train": {
        "precision": "bf16",
        "attention": "sdpa",
        "batch": 1,
        "grad_accum": None,  # derived from global_batch, else 1
        "global_batch": None,  # derived: batch * grad_accum * data
        "optimizer": {"fn": "adamw", "args": {"lr": 1e-4}},
        "steps": 20,
        "warmup": 5,
        "resolution": None,
        "seq_len": None,
        "objective": None,  # rectified_flow for mmdit and flux, causal_lm for llama
        "grad_clip": None,
        "compile": None,  # None: the optimisation tier decides (plan/tuning.py)
        "seed": 0,
    },
    "infer": {
        "precision": "bf16",
        "attention": "sdpa",
        "batch": 1,
        "steps": 5,
        "warmup": 2,
        "compile": None,  # None: the optimisation tier decides (plan/tuning.py)
        "graphs": False,
        "seed": 0,
        "resolution": None,
        "denoising_steps": None,
        "guidance": None,
        "input_tokens": None,
        "output_tokens": None,
        "kv_cache": None,
    },
    "measure": {"metric": None, "repeat": 1, "timeout": 3600, "profile": False},
    "slurm": {
        "partition": None,
        "account": None,
        "time": None,  # derived: repeat x timeout + 10 minutes
        "gres": None,
        "exclusive": True,
        "job_name": None,  # derived: benchc-<experiment>-<target>-<point>
        "log": "slurm-%j.out",
    },
}

MODEL_DEFAULTS = {
    "mmdit": {
        "preset": None,
        "depth": None,
        "heads": None,  # = depth
        "head_dim": 64,
        "patch": 2,
        "in_channels": 16,
        "joint_attention_dim": 4096,
        "caption_projection_dim": None,  # = hidden
        "pooled_projection_dim": 2048,
        "pos_embed_max_size": 192,
        "qk_norm": "none",
        "text_tokens": 154,  # CLIP-L/G 77 + T5 77
        "weights": None,
    },
    "llama": {
        "preset": None,
        "hidden": None,
        "layers": None,
        "heads": None,
        "kv_heads": None,  # = heads
        "head_dim": None,  # = hidden / heads
        "intermediate": None,
        "vocab": 32000,
        "max_positions": 4096,
        "rope_theta": None,  # the family's
        "tie_embeddings": None,
        "model_type": "llama",
        "config": None,
        "config_extra": {},  # a preset's or config folder's config keys beyond the settings
        "weights": None,
    },
}
# any transformers causal LM: every unset setting is its family's default (catalog/causal_lm.py)
MODEL_DEFAULTS["causal_lm"] = {
    **dict.fromkeys(MODEL_DEFAULTS["llama"]),
    "experts": None,
    "experts_per_token": None,
    "sliding_window": None,
    "config_extra": {},
}
# the spec's model kind -> the plan's: `model llama` is a causal LM of model_type llama
PLAN_KIND = {"llama": "causal_lm"}
CAUSAL_KINDS = ("llama", "causal_lm")
MODEL_DEFAULTS["sd3"] = {
    **MODEL_DEFAULTS["mmdit"],
    "text_encoders": ["clip_l", "clip_g", "t5"],
    "t5_tokens": 256,
}
# Flux (catalog/flux.py): presets flux.1-dev and flux.1-schnell; a shape written whole otherwise
MODEL_DEFAULTS["flux"] = {
    "preset": None,
    "depth": None,
    "single_depth": None,
    "heads": None,
    "head_dim": 128,
    "joint_attention_dim": 4096,  # T5 XXL's width
    "pooled_projection_dim": 768,  # CLIP-L's
    "guidance": True,  # embeds the distilled guidance value, as FLUX.1 [dev]
    "text_tokens": 512,  # T5 tokens
    "weights": None,
}
REQUIRED_MODEL = {
    "mmdit": ("depth",),
    "sd3": ("depth",),
    "llama": ("hidden", "layers", "heads", "intermediate"),
    "causal_lm": ("hidden", "layers", "heads", "intermediate"),
    "flux": ("depth", "single_depth", "heads"),
}

# Workload settings that only make sense for some model kinds, and the default per kind.
WORKLOAD_FIELDS = {
    ("train", "mmdit"): {"resolution": 256, "objective": "rectified_flow"},
    ("train", "causal_lm"): {"seq_len": 2048, "objective": "causal_lm"},
    ("infer", "sd3"): {"resolution": 1024, "denoising_steps": 28, "guidance": 7.0},
    ("infer", "causal_lm"): {"input_tokens": 128, "output_tokens": 128, "kv_cache": "static"},
    ("train", "flux"): {"resolution": 512, "objective": "rectified_flow"},
    # guidance: the distilled guidance value FLUX.1 [dev] embeds (none for a model without it)
    ("infer", "flux"): {"resolution": 1024, "denoising_steps": 28, "guidance": 3.5},
}
KIND_SPECIFIC = {"resolution", "seq_len", "objective", "denoising_steps", "guidance",
                 "input_tokens", "output_tokens", "kv_cache"}  # fmt: skip
# The metrics each workload measures (catalog/metrics.py); the first is the default headline.
METRICS = {workload: metrics_of(*workload) for workload in WORKLOAD_FIELDS}
DEFAULT_METRIC = {key: metrics[0] for key, metrics in METRICS.items()}
OBJECTIVES = {"mmdit": "rectified_flow", "causal_lm": "causal_lm", "flux": "rectified_flow"}


@dataclass
class Resolved:
    """Every setting of a variant, filled: one plain dict per section."""

    model_kind: str
    model: dict
    workload_kind: str
    workload: dict
    cluster: dict
    parallel: dict
    measure: dict
    slurm: dict
    settings: Settings


def resolve(settings: Settings) -> Resolved:
    problems: list[Diagnostic] = []
    model_block = settings.get(("model",), {})
    model_kind = next(iter(model_block))
    model = _resolve_model(settings, model_kind, problems)

    workloads = [name for name in ("train", "infer") if settings.has((name,))]
    if len(workloads) != 1:
        if workloads:
            message, span = (
                "an experiment has one workload: train or infer, not both",
                settings.span(("infer",), True),
            )
        else:
            message, span = "the experiment has no workload", settings.document.experiment_span
        raise BenchError(
            Diagnostic(message, span, hint="add a train { ... } block (training throughput) "
                       "or an infer { ... } block (inference latency and throughput)")
        )  # fmt: skip
    kind = workloads[0]
    family = PLAN_KIND.get(model_kind, model_kind)
    supported = {w for w, m in WORKLOAD_FIELDS if m == family}
    if kind not in supported:
        hint = {
            ("train", "sd3"): "the sd3 block is the whole inference pipeline; to train its "
            "transformer write model mmdit { ... }",
            ("infer", "mmdit"): "to benchmark text-to-image inference write model sd3 { ... } "
            "(the whole pipeline around the MMDiT)",
        }.get((kind, model_kind))
        raise BenchError(
            Diagnostic(f"model {model_kind} has no {kind} workload", settings.span((kind,), True),
                       hint=hint)
        )  # fmt: skip
    own = WORKLOAD_FIELDS[(kind, family)]
    workload = dict(DEFAULTS[kind])
    for key, value in settings.get((kind,), {}).items():
        if key in KIND_SPECIFIC and key not in own:
            applies = sorted({m for (w, m), fields in WORKLOAD_FIELDS.items() if key in fields})
            applies = ["llama or causal_lm" if m == "causal_lm" else m for m in applies]
            problems.append(
                Diagnostic(
                    f"{kind}.{key} does not apply to model {model_kind}",
                    settings.span((kind, key), True),
                    hint=f"{key} applies to model {' and '.join(applies)}; remove it",
                )
            )
        workload[key] = value
    for key, value in own.items():
        if workload.get(key) is None:
            workload[key] = value
    if family == "flux" and kind == "infer" and not model["guidance"]:
        _no_guidance(settings, model_kind, workload, problems)
    if family == "flux" and model.get("pipeline_folder") is not None:
        _flux_folder(settings, kind, model, problems)
    optimizer = workload.get("optimizer")
    if isinstance(optimizer, str):
        optimizer = {"fn": optimizer, "args": {}}
    if optimizer is not None:  # adamw() and adamw mean the documented default rate, not torch's
        workload["optimizer"] = {"fn": optimizer["fn"], "args": {"lr": 1e-4, **optimizer["args"]}}

    sections = {}
    for name in ("cluster", "parallel", "measure", "slurm"):
        sections[name] = {**DEFAULTS[name], **settings.get((name,), {})}
    if sections["measure"]["metric"] is None:
        sections["measure"]["metric"] = DEFAULT_METRIC[(kind, family)]
    if problems:
        raise BenchError(problems)
    return Resolved(model_kind, model, kind, workload, sections["cluster"], sections["parallel"],
                    sections["measure"], sections["slurm"], settings)  # fmt: skip


def _resolve_model(settings: Settings, kind: str, problems: list) -> dict:
    written = settings.get(("model", kind), {})
    model = dict(MODEL_DEFAULTS[kind])
    preset = written.get("preset")
    preset_values: dict = {}
    if preset is not None:
        known = PRESETS[kind]
        if preset not in known:
            raise BenchError(
                Diagnostic(
                    f'unknown {kind} preset "{preset}"',
                    settings.span(("model", kind, "preset")),
                    hint=choices_hint(preset, known, f"{kind} presets"),
                )
            )
        preset_values = known[preset]
        model.update(preset_values)
    model.update(written)
    if model["weights"] is not None:  # the checkpoint gives the shape the spec left to it
        resolve_weights(settings, kind, model, preset_values, problems)
    if kind in CAUSAL_KINDS:
        resolve_causal_lm(settings, kind, model, written, problems)
    if kind == "flux":
        check_flux(settings, model, problems)
    if kind == "sd3" and "text_tokens" in written:
        problems.append(
            Diagnostic(
                "model.sd3.text_tokens does not apply: the pipeline makes its own text context",
                settings.span(("model", kind, "text_tokens"), True),
                hint="its length is CLIP's 77 tokens + t5_tokens; set t5_tokens instead",
            )
        )
    missing = [key for key in REQUIRED_MODEL[kind] if model.get(key) is None]
    if missing and (model["weights"] is not None or model.get("config") is not None):  # its error says why
        model.update(dict.fromkeys(missing, 1))
    elif missing:
        presets = ", ".join(f'"{p}"' for p in PRESETS[kind])
        problems.append(
            Diagnostic(
                f"model {kind} needs {', '.join(missing)} (or a preset)",
                settings.span(("model", kind), True),
                hint=f"write preset = ... (one of {presets}) or set {', '.join(missing)}",
            )
        )
        for key in missing:
            model[key] = 1  # keep going to report more problems; never reaches a plan
    return model


def build(resolved: Resolved, variant: Variant, target: Target, smoke: bool,
          overrides: tuple[str, ...]) -> Plan:  # fmt: skip
    """Compute derived values and freeze the plan. Consistency is checked by validate.semantic."""
    r = resolved
    cluster = Cluster(
        nodes=int(r.cluster["nodes"]),
        devices_per_node=int(r.cluster["devices_per_node"]),
        world_size=int(r.cluster["nodes"]) * int(r.cluster["devices_per_node"]),
    )
    p = r.parallel
    tensor, pipeline = int(p["tensor"]), int(p["pipeline"])
    data = int(p["data"]) if p["data"] is not None else max(1, cluster.world_size // (tensor * pipeline))
    parallel = Parallel(data, tensor, pipeline, p["sharding"], bool(p["activation_checkpointing"]))
    model = _build_model(r.model_kind, r.model, r.settings, r.workload_kind)
    transformer = model.transformer if isinstance(model, SD3Pipeline | FluxPipeline) else model
    w = r.workload
    if r.workload_kind == "train":
        batch = int(w["batch"])
        accum = w["grad_accum"]
        if accum is None:
            accum = 1
            if w["global_batch"] is not None and int(w["global_batch"]) % (batch * data) == 0:
                accum = int(w["global_batch"]) // (batch * data)
        global_batch = int(w["global_batch"]) if w["global_batch"] is not None else batch * int(accum) * data
        image = _image_shape(w["resolution"], transformer)
        args = dict(sorted(w["optimizer"].get("args", {}).items()))
        workload = TrainWorkload(
            precision=w["precision"], attention=w["attention"], micro_batch=batch,
            grad_accum=int(accum), global_batch=global_batch,
            optimizer=Optimizer(w["optimizer"]["fn"], args),
            steps=int(w["steps"]), warmup=int(w["warmup"]), objective=w["objective"],
            grad_clip=None if w["grad_clip"] is None else float(w["grad_clip"]),
            compile=_bool_or_none(w["compile"]), seed=int(w["seed"]), **image,
            seq_len=None if w["seq_len"] is None else int(w["seq_len"]),
        )  # fmt: skip
    else:
        image = _image_shape(w["resolution"], transformer)
        guidance = None if w["guidance"] is None else float(w["guidance"])
        workload = InferWorkload(
            precision=w["precision"], attention=w["attention"], batch=int(w["batch"]),
            steps=int(w["steps"]), warmup=int(w["warmup"]), compile=_bool_or_none(w["compile"]),
            graphs=bool(w["graphs"]), seed=int(w["seed"]), **image,
            denoising_steps=_int_or_none(w["denoising_steps"]), guidance=guidance,
            # Flux's guidance is a value its transformer embeds: one pass per step, never two
            classifier_free_guidance=None if guidance is None else guidance > 1.0 and
            not isinstance(model, FluxPipeline),
            input_tokens=_int_or_none(w["input_tokens"]),
            output_tokens=_int_or_none(w["output_tokens"]), kv_cache=w["kv_cache"],
            decode_bucket=_decode_bucket(w, smoke),
        )  # fmt: skip
    measure = Measure(r.measure["metric"], int(r.measure["repeat"]), float(r.measure["timeout"]),
                      bool(r.measure["profile"]))  # fmt: skip
    time = r.slurm["time"]
    slurm = Slurm(
        requested=r.settings.has(("slurm",)), partition=r.slurm["partition"],
        account=r.slurm["account"], time=None if time is None else str(time), gres=r.slurm["gres"],
        exclusive=bool(r.slurm["exclusive"]), job_name=r.slurm["job_name"], log=r.slurm["log"],
    )  # fmt: skip
    document = r.settings.document
    runtime = str(r.settings.get(("runtime",), "torch"))
    plan = Plan(
        experiment=document.experiment,
        description=r.settings.get(("description",)),
        target=target,
        point=variant.point,
        point_values=variant.point_values,
        smoke=smoke,
        model=model,
        workload=workload,
        cluster=cluster,
        parallel=parallel,
        measure=measure,
        slurm=slurm,
        references=() if smoke else _references(document, variant, r),
        declared_references=() if smoke else _declared_references(document),
        # absolute paths: the same spec compiles to the same bytes from any working folder
        spec=SpecInfo(
            path=str(Path(document.files[0].path).resolve()),
            sha256=document.files[0].sha256,
            files=tuple((str(Path(f.path).resolve()), f.sha256) for f in document.files),
        ),
        overrides=overrides,
        cost=_cost(model, workload),
        prices=_prices(r.settings.get(("prices",))),
        runtime=runtime,
        checkpoint=r.model.get("checkpoint", r.model["weights"]),
        tuning=derive_tuning(
            str(r.settings.get(("optimize",), DEFAULT_TIER)),
            target.family,
            transformer.qk_norm == "none" if isinstance(transformer, MMDiTModel) else None,
            r.workload_kind == "train",
            workload.attention,
            workload.compile,
            runtime,
            parallel.sharding,
            workload.precision,
            static_cache=not isinstance(workload, InferWorkload) or workload.kv_cache != "dynamic",
            graphs=isinstance(workload, InferWorkload) and workload.graphs,
            pipeline=isinstance(model, SD3Pipeline | FluxPipeline),
        ),
    )
    plan.dims  # noqa: B018 - the parallel layout, derived here once (its invariants checked) and kept
    return plan


def _prices(block) -> PriceList | None:
    """The spec's prices (validated by the schema and check_names), or None."""
    if not isinstance(block, dict) or not block.get("per_device_hour"):
        return None
    table = tuple(sorted((str(k), float(v)) for k, v in block["per_device_hour"].items()))
    return PriceList(str(block.get("currency", "USD")), table)


def _cost(model, workload) -> ModelCost | None:
    """Model size and FLOPs per sample (an image, or a sequence) where modelled (plan/flops.py)."""
    if isinstance(model, CausalLM) and isinstance(workload, TrainWorkload):
        return causal_lm_cost(model.census, workload.seq_len)
    if isinstance(model, FluxModel) and workload.image_tokens:
        return flux_cost(model.census, workload.image_tokens, model.text_tokens, True)
    if isinstance(model, FluxPipeline) and workload.image_tokens:
        # the transformer's FLOPs only, per image: one forward per denoising step
        t = model.transformer
        step = flux_cost(t.census, workload.image_tokens, t.text_tokens, False)
        return ModelCost(step.params, step.forward_flops_per_sample * workload.denoising_steps, None)
    if isinstance(model, SD3Pipeline) and workload.image_tokens:
        # the transformer's FLOPs only (text encoders and VAE are not counted), per image:
        # one forward per denoising step, two with classifier-free guidance
        t = model.transformer
        step = mmdit_cost(t.depth, t.hidden, t.patch, t.in_channels, t.joint_attention_dim,
                          t.pooled_projection_dim, t.head_dim, t.qk_norm, workload.image_tokens,
                          CLIP_TOKENS + model.t5_tokens)  # fmt: skip
        passes = workload.denoising_steps * (2 if workload.classifier_free_guidance else 1)
        return ModelCost(step.params, step.forward_flops_per_sample * passes, None)
    if isinstance(model, CausalLM) and workload.input_tokens:
        forward = causal_lm_generate_flops(model.census, workload.input_tokens, workload.output_tokens)
        return ModelCost(model.census.params, forward, None)
    if isinstance(model, MMDiTModel) and workload.image_tokens:
        return mmdit_cost(
            model.depth, model.hidden, model.patch, model.in_channels, model.joint_attention_dim,
            model.pooled_projection_dim, model.head_dim, model.qk_norm, workload.image_tokens,
            model.text_tokens,
        )  # fmt: skip
    return None


def _decode_bucket(w: dict, smoke: bool) -> int | None:
    """The decode's key bucket where generation keeps a static KV cache, else None."""
    if w["input_tokens"] is None or w["kv_cache"] != "static":
        return None
    return SMOKE_DECODE_BUCKET if smoke else DECODE_BUCKET


def _bool_or_none(value) -> bool | None:
    return None if value is None else bool(value)


def _int_or_none(value) -> int | None:
    return None if value is None else int(value)


def _image_shape(resolution, transformer) -> dict:
    if resolution is None or transformer is None:
        return {"resolution": None, "latent_size": None, "image_tokens": None}
    latent = int(resolution) // VAE_DOWNSAMPLING
    return {
        "resolution": int(resolution),
        "latent_size": latent,
        "image_tokens": (latent // transformer.patch) ** 2,
    }


def _build_model(kind: str, m: dict, settings: Settings, workload: str):
    if kind in CAUSAL_KINDS:
        return build_causal_lm(m, settings.span(("model", kind), True))
    if kind == "flux":
        return build_flux(m, workload, settings.span(("model", kind), True))
    depth = int(m["depth"])
    heads = int(m["heads"] if m["heads"] is not None else depth)
    hidden = heads * int(m["head_dim"])
    transformer = MMDiTModel(
        preset=m["preset"], depth=depth, heads=heads, head_dim=int(m["head_dim"]), hidden=hidden,
        patch=int(m["patch"]), in_channels=int(m["in_channels"]),
        joint_attention_dim=int(m["joint_attention_dim"]),
        caption_projection_dim=int(m["caption_projection_dim"] or hidden),
        pooled_projection_dim=int(m["pooled_projection_dim"]),
        pos_embed_max_size=int(m["pos_embed_max_size"]), qk_norm=m["qk_norm"],
        text_tokens=int(m["text_tokens"]), weights=m["weights"] if kind == "mmdit" else None,
    )  # fmt: skip
    if kind == "mmdit":
        return transformer
    return SD3Pipeline(transformer, tuple(m["text_encoders"]), int(m["t5_tokens"]), m["weights"])


def _no_guidance(settings: Settings, kind: str, workload: dict, problems: list) -> None:
    """A Flux transformer without a guidance embedder (FLUX.1 [schnell]) takes no guidance
    value: FluxPipeline would drop it, so a written one is refused, the default left out."""
    if settings.has(("infer", "guidance")):
        problems.append(Diagnostic(
            "infer.guidance does not apply: this Flux transformer embeds no guidance value",
            settings.span(("infer", "guidance"), True),
            hint=f"remove it, or write model.{kind}.guidance = true (a model like FLUX.1 [dev])",
        ))  # fmt: skip
    workload["guidance"] = None


def _flux_folder(settings: Settings, workload: str, model: dict, problems: list) -> None:
    """Training reads a pipeline folder's transformer; inference needs the whole pipeline."""
    if workload == "train" and model["pipeline_folder"]:
        model["weights"] = str(Path(model["weights"]) / "transformer")
    elif workload == "infer" and not model["pipeline_folder"]:
        problems.append(Diagnostic(
            "weights: inference runs the whole Flux pipeline, and this folder holds its transformer only",
            settings.span(("model", "flux", "weights")),
            hint="name the folder FluxPipeline.save_pretrained wrote (model_index.json and its parts)",
        ))  # fmt: skip


def resolved_value(r: Resolved, path: tuple[str, ...]):
    """A setting's value after defaults and presets (train.batch, model.mmdit.depth, ...)."""
    head, rest = path[0], path[1:]
    if head in ("train", "infer") and head == r.workload_kind and len(rest) == 1:
        return r.workload.get(rest[0])
    if head == "model" and len(rest) == 2 and rest[0] == r.model_kind:
        return r.model.get(rest[1])
    if head in ("cluster", "parallel", "measure", "slurm") and len(rest) == 1:
        return getattr(r, head).get(rest[0])
    return r.settings.get(path)


def _references(document: Document, variant: Variant, r: Resolved) -> tuple[Reference, ...]:
    """The published figures for this variant's target whose `where` matches its point.

    Smoke plans carry none: a shrunk model on a CPU is no comparison with a published figure.
    """
    found = []
    for label, ref in sorted((document.get(("reference",)) or {}).items()):
        if ref.get("target") != variant.target:
            continue
        where = _flatten(ref.get("where") or {})
        if all(resolved_value(r, tuple(path.split("."))) == value for path, value in where.items()):
            found.append(Reference(label, ref["target"], float(ref["value"]), ref["unit"],
                                   ref.get("source"), where))  # fmt: skip
    return tuple(found)


def _declared_references(document: Document) -> tuple[Reference, ...]:
    """Every reference of the spec, whichever target and point it names."""
    return tuple(
        Reference(
            label,
            ref["target"],
            float(ref["value"]),
            ref["unit"],
            ref.get("source"),
            _flatten(ref.get("where") or {}),
        )  # fmt: skip
        for label, ref in sorted((document.get(("reference",)) or {}).items())
    )


def _flatten(block: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in block.items():
        if isinstance(value, dict) and set(value) != {"fn", "args"}:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
