"""Render one plan into its benchmark program (bench.py), and say what cannot be generated yet.

Logic lives here; templates hold layout. Every value a template prints comes from the
dictionaries built below and reaches Python code through the `py` filter (a literal). The
parallel layout (DeepSpeed, the meta-device build, the world size) is the plan's, plan.dims.
"""

from __future__ import annotations

import json
from pathlib import PurePath

import jinja2

from .. import __version__
from ..catalog.causal_lm import GAUDI_ALWAYS_FUSED, GAUDI_CLASSES
from ..catalog.flux import CLIP_TEXT_TOKENS, SCHEDULERS
from ..catalog.flux import FULL_PARTS as FLUX_FULL_PARTS
from ..catalog.flux import SMOKE_PARTS as FLUX_SMOKE_PARTS
from ..catalog.metrics import METRICS
from ..catalog.sd3_components import CLIP_TOKENS
from ..catalog.sd3_components import FULL as FULL_PARTS
from ..catalog.sd3_components import SMOKE as SMOKE_PARTS
from ..plan.flux import config_of
from ..plan.loading import weights_by_rank
from ..plan.memory import estimate_memory
from ..plan.roofline import roofline
from ..plan.types import CausalLM, FluxModel, FluxPipeline, MMDiTModel, Plan, SD3Pipeline, TrainWorkload
from .environment import environment

METRICS_SCHEMA_VERSION = 1
PROGRAM = "bench.py"
# inference programs: (core template, entry function) by model kind
ENTRIES = {"causal_lm": ("core_generate.py.j2", "generate_benchmark"),
           "sd3": ("core_pipeline.py.j2", "pipeline_benchmark"),
           "flux_pipeline": ("core_pipeline.py.j2", "pipeline_benchmark")}  # fmt: skip
PIPELINES = ("sd3", "flux_pipeline")
# the pipeline class each target's program builds, and what its transformer is called
PIPELINE_CLASSES = {
    ("sd3", "hpu"): "GaudiStableDiffusion3Pipeline", ("sd3", ""): "StableDiffusion3Pipeline",
    ("flux_pipeline", "hpu"): "GaudiFluxPipeline", ("flux_pipeline", ""): "FluxPipeline",
}  # fmt: skip
TRANSFORMER_CLASSES = {"sd3": "SD3Transformer2DModel", "flux_pipeline": "FluxTransformer2DModel"}
TRANSFORMER_NAMES = {"sd3": "MMDiT", "flux_pipeline": "Flux transformer", "flux": "Flux transformer"}


def _latency(name: str) -> dict | None:
    """Where a latency headline sits in the metrics and its unit; None: the throughput."""
    metric = METRICS[name]
    if metric.section is None:
        return None
    return {"section": metric.section, "key": metric.key, "unit": metric.unit}


def _mmdit_model(model: MMDiTModel, work: TrainWorkload) -> dict:
    return {
        "kind": model.kind,
        "weights": model.weights,
        "meta_init": False,  # a 2B-8B MMDiT fits every rank before FSDP2 shards it
        "text_tokens": model.text_tokens,
        # keyword arguments of diffusers.SD3Transformer2DModel
        "config": {
            "sample_size": work.latent_size,
            "patch_size": model.patch,
            "in_channels": model.in_channels,
            "out_channels": model.in_channels,
            "num_layers": model.depth,
            "attention_head_dim": model.head_dim,
            "num_attention_heads": model.heads,
            "joint_attention_dim": model.joint_attention_dim,
            "caption_projection_dim": model.caption_projection_dim,
            "pooled_projection_dim": model.pooled_projection_dim,
            "pos_embed_max_size": model.pos_embed_max_size,
            "qk_norm": None if model.qk_norm == "none" else model.qk_norm,
        },
    }


# Generation on cpu and cuda: grouped-query attention without repeated key/value heads
# (model_llama.py.j2's grouped_sdpa, registered with transformers' attention interface).
GROUPED_SDPA = "benchc_grouped_sdpa"


def grouped_attention(work, family: str) -> bool:
    return work.kind == "infer" and family != "hpu" and work.attention != "eager"


def grouped_llama(plan: Plan) -> bool:
    return plan.model.kind == "causal_lm" and grouped_attention(plan.workload, plan.target.family)


def _llama_attention(work, family: str) -> str:
    """transformers' attention implementation: Gaudi's Llama runs its own attention (FusedSDPA
    via forward options); elsewhere the spec's kernel picks it, and the adapter narrows SDPA."""
    if family == "hpu" or work.attention == "eager":
        return "eager"
    return GROUPED_SDPA if grouped_attention(work, family) else "sdpa"


def _causal_lm_model(model: CausalLM, work, family: str, meta_init: bool) -> dict:
    # the keyword arguments of transformers.AutoConfig.for_model(model_type, ...): the config
    # the census counted (plan/census.py), and the attention implementation
    config = {k: v for k, v in json.loads(model.config).items() if k != "model_type"}
    config["attn_implementation"] = _llama_attention(work, family)
    return {
        "kind": model.kind,
        "model_type": model.model_type,
        "experts": model.experts,  # a mixture of experts: DDP finds the experts no token reached
        "weights": model.weights,
        "meta_init": meta_init,  # plan.dims.meta_init (plan/parallel.py)
        "config": config,
    }


def _flux_model(model: FluxModel, meta_init: bool) -> dict:
    return {
        "kind": model.kind,
        "weights": model.weights,
        "meta_init": meta_init,  # plan.dims.meta_init: FSDP2 allocates each rank's shards only
        "text_tokens": model.text_tokens,
        "config": config_of(model),  # keyword arguments of diffusers.FluxTransformer2DModel
    }


def _flux_pipeline_model(model: FluxPipeline, smoke: bool) -> dict:
    t = model.transformer
    return {
        "kind": model.kind,
        "weights": model.weights,
        "config": config_of(t),
        "clip_tokens": CLIP_TEXT_TOKENS,
        "t5_tokens": t.text_tokens,
        "parts": FLUX_SMOKE_PARTS if smoke else FLUX_FULL_PARTS,
        # FlowMatchEulerDiscreteScheduler's, as the model's own scheduler_config.json
        "scheduler": SCHEDULERS[t.guidance],
    }


def _sd3_model(model: SD3Pipeline, work, smoke: bool) -> dict:
    settings = _mmdit_model(model.transformer, work)
    settings.update(
        kind=model.kind,
        weights=model.weights,
        text_encoders=list(model.text_encoders),
        clip_tokens=CLIP_TOKENS,
        t5_tokens=model.t5_tokens,
        parts=SMOKE_PARTS if smoke else FULL_PARTS,
    )
    del settings["text_tokens"]
    return settings


def _decode_settings(plan: Plan) -> dict | None:
    """Generation: the bytes each device must move over the decode steps (the roofline's
    memory bound of its decode phase) and its HBM bandwidth, for the program's achieved
    decode bandwidth (MFU means little for decode). None for other inference."""
    if plan.model.kind != "causal_lm":
        return None
    decode = [p for p in roofline(plan).phases if p.name == "decode"]
    memory = [b for p in decode for b in p.bounds if b.name == "memory"]
    if not memory:
        return None
    bandwidth = plan.target.hbm_tb_s
    return {
        "bytes_per_device": memory[0].amount,
        "hbm_bytes_per_s": None if bandwidth is None else bandwidth * 1e12,
    }


def _infer_settings(plan: Plan) -> dict:
    work = plan.workload
    return {
        "infer": {
            "precision": work.precision,
            "attention": work.attention,
            "batch": work.batch,
            "steps": work.steps,
            "warmup": work.warmup,
            "graphs": work.graphs,
            "seed": work.seed,
            "input_tokens": work.input_tokens,
            "output_tokens": work.output_tokens,
            "kv_cache": work.kv_cache,
            "decode_bucket": work.decode_bucket,  # keys read up to the filled length rounded up to it
            "resolution": work.resolution,
            "denoising_steps": work.denoising_steps,
            "guidance": work.guidance,
        },
        "flops_per_sample": plan.cost.forward_flops_per_sample if plan.cost else None,
        "decode": _decode_settings(plan),
    }


def _common_settings(plan: Plan, model_settings: dict, items_per_sample: int) -> dict:
    return {
        "experiment": plan.experiment,
        "description": plan.description,
        "target": plan.target.name,
        "point": plan.point,
        "point_values": dict(plan.point_values),
        "smoke": plan.smoke,
        "spec": PurePath(plan.spec.path).name,  # the file's name: the program is the same anywhere
        "spec_sha256": plan.spec.sha256,
        "compiler": f"benchc {__version__}",
        "metrics_schema_version": METRICS_SCHEMA_VERSION,
        "workload": plan.workload.kind,
        "metric": plan.measure.metric,
        # measure.profile: a few more steps after the measured window, under torch.profiler
        # (the program's --profile asks the same of one run)
        "profile": plan.measure.profile,
        # the unit of the program's throughput; a latency headline's section, key and unit
        "unit": METRICS[plan.measure.metric].throughput_unit,
        "headline": _latency(plan.measure.metric),
        "items_per_sample": items_per_sample,  # 1 image, or seq_len tokens, per sample
        "world_size": plan.dims.world_size,
        "model": model_settings,
        "parallel": {
            "data": plan.parallel.data,
            "tensor": plan.parallel.tensor,
            "sharding": plan.parallel.sharding,
            "activation_checkpointing": plan.parallel.activation_checkpointing,
        },
        "runtime": plan.runtime,
        # the optimisation tier and every knob it turned on (plan/tuning.py); the program
        # acts on the knobs and records them in its metrics
        "optimize": {"tier": plan.tuning.tier, "knobs": plan.tuning.knobs()},
        "params": plan.cost.params if plan.cost else None,
        # the weights folder checked before the run (loaded unless --smoke), or None
        "checkpoint": None if plan.checkpoint is None else {"path": plan.checkpoint, "load": not plan.smoke},
        "peak_flops_per_device": plan.target.peak_flops(plan.workload.precision),
        # what `benchc estimate` says a device holds at the peak, recorded beside an
        # out-of-memory ending (the target's memory; None on the cpu, whose host varies)
        "memory_estimate": _memory_estimate(plan),
    }


def _memory_estimate(plan: Plan) -> dict | None:
    if plan.cost is None:
        return None
    gb = plan.target.memory_gb
    return {"bytes_per_device": round(estimate_memory(plan).total),
            "device_bytes": round(gb * 1e9) if gb else None}  # fmt: skip


def _train_settings(plan: Plan) -> dict:
    work = plan.workload
    return {
        "train": {
            "precision": work.precision,
            "attention": work.attention,
            "micro_batch": work.micro_batch,
            "grad_accum": work.grad_accum,
            "global_batch": work.global_batch,
            "optimizer": {"name": work.optimizer.name, "args": dict(work.optimizer.args)},
            "steps": work.steps,
            "warmup": work.warmup,
            "grad_clip": work.grad_clip,
            "seed": work.seed,
            "latent_size": work.latent_size,
            "seq_len": work.seq_len,
        },
        "train_flops_per_sample": plan.cost.train_flops_per_sample if plan.cost else None,
    }


def program_settings(plan: Plan) -> dict:
    """The PLAN literal of the program: what its core reads, nothing target-specific in code."""
    model, work = plan.model, plan.workload
    family, meta_init = plan.target.family, plan.dims.meta_init
    if isinstance(model, SD3Pipeline):
        return {**_common_settings(plan, _sd3_model(model, work, plan.smoke), 1), **_infer_settings(plan)}
    if isinstance(model, FluxPipeline):
        flux = _flux_pipeline_model(model, plan.smoke)
        return {**_common_settings(plan, flux, 1), **_infer_settings(plan)}
    if not isinstance(work, TrainWorkload):
        llama = _causal_lm_model(model, work, family, meta_init)
        return {**_common_settings(plan, llama, 1), **_infer_settings(plan)}
    if isinstance(model, CausalLM):
        common = _common_settings(plan, _causal_lm_model(model, work, family, meta_init), work.seq_len)
    elif isinstance(model, FluxModel):
        common = _common_settings(plan, _flux_model(model, meta_init), 1)
    else:
        common = _common_settings(plan, _mmdit_model(model, work), 1)
    return {**common, **_train_settings(plan)}


def import_lines(
    family: str,
    kind: str,
    workload: str,
    deepspeed: bool = False,
    runtime: str = "torch",
    grouped: bool = False,
    checkpoint: bool = False,
    weights: str | None = None,
) -> list[str]:
    """The third-party imports of a program, sorted and laid out as ruff (isort) wants them."""
    plain = {"import torch", "import torch.distributed as dist"}
    if deepspeed and not (runtime == "accelerate" and weights == "tensors"):  # its plugin's, then
        plain.add("import deepspeed")
    names: dict[str, set[str]] = {}

    def need(module: str, *items: str) -> None:
        names.setdefault(module, set()).update(items)

    if family == "hpu":
        plain |= {"import habana_frameworks.torch.core as htcore",
                  "import habana_frameworks.torch.distributed.hccl",
                  "import habana_frameworks.torch.hpu as hthpu"}  # fmt: skip
    else:
        need("torch.nn.attention", "SDPBackend", "sdpa_kernel")
    if kind == "mmdit":
        need("diffusers", "SD3Transformer2DModel")
    if kind == "flux":
        need("diffusers", "FluxTransformer2DModel")
    if kind == "flux_pipeline":
        need("diffusers", "AutoencoderKL", "FlowMatchEulerDiscreteScheduler", "FluxTransformer2DModel")
        if family != "hpu":
            need("diffusers", "FluxPipeline")
        need("transformers", "CLIPTextConfig", "CLIPTextModel", "CLIPTokenizer", "T5Config", "T5EncoderModel",
             "T5TokenizerFast")  # fmt: skip
        need("tokenizers", "Tokenizer", "models", "pre_tokenizers", "trainers")
        if family == "hpu":
            need("optimum.habana.diffusers.pipelines.flux.pipeline_flux", "GaudiFluxPipeline")
            need("optimum.habana.transformers.gaudi_configuration", "GaudiConfig")
    if kind == "sd3":
        need("diffusers", "AutoencoderKL", "FlowMatchEulerDiscreteScheduler", "SD3Transformer2DModel")
        if family != "hpu":
            need("diffusers", "StableDiffusion3Pipeline")
        need("transformers", "CLIPTextConfig", "CLIPTextModelWithProjection", "CLIPTokenizer", "T5Config",
             "T5EncoderModel", "T5TokenizerFast")  # fmt: skip
        need("tokenizers", "Tokenizer", "models", "pre_tokenizers", "trainers")
        if family == "hpu":
            need("optimum.habana.diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3",
                 "GaudiStableDiffusion3Pipeline")  # fmt: skip
            need("optimum.habana.transformers.gaudi_configuration", "GaudiConfig")
    if kind == "causal_lm":
        need("transformers", "AutoConfig", "AutoModelForCausalLM")
        if workload == "infer":  # core_generate.py.j2's DecodeLoop
            need("transformers", "LogitsProcessor", "LogitsProcessorList", "StaticCache")
        if family == "cuda" and workload == "infer":
            need("transformers", "CompileConfig")
        if grouped:  # model_llama.py.j2's grouped_sdpa
            need("transformers", "AttentionInterface")
            need("transformers.masking_utils", "AttentionMaskInterface", "sdpa_mask")
        if family == "hpu":
            need("optimum.habana.transformers.modeling_utils", "adapt_transformers_to_gaudi")
    if checkpoint or weights:  # core_weights.py.j2; core_meta.py.j2's load_local_parts
        need("safetensors", "safe_open")
    if weights == "shards":
        need("torch.distributed.tensor", "DTensor")
    if kind not in PIPELINES:  # core_meta.py.j2
        need("accelerate", "init_empty_weights")
    if workload == "train" and runtime == "accelerate":
        need("accelerate", "DeepSpeedPlugin" if deepspeed else "FullyShardedDataParallelPlugin")
        if not deepspeed:
            need("torch.distributed.fsdp", "MixedPrecisionPolicy")
        if family == "hpu":
            need("optimum.habana.accelerate.accelerator", "GaudiAccelerator")
            need("accelerate.utils", "DistributedDataParallelKwargs")
        else:
            need("accelerate", "Accelerator")
        if family == "cpu":
            need("accelerate.utils", "DistributedType")
    elif workload == "train":
        need("torch.distributed.fsdp", "MixedPrecisionPolicy", "fully_shard")
        if family != "hpu":
            need("torch.distributed.fsdp.sharded_grad_scaler", "ShardedGradScaler")
        need("torch.nn.parallel", "DistributedDataParallel")
    if workload == "train":
        if family == "hpu":
            if runtime == "torch":  # accelerate clips with its own clip_grad_norm_
                need("habana_frameworks.torch.hpex.normalization", "FusedClipNorm")
            need("habana_frameworks.torch.hpex.optimizers", "FusedAdamW")
    elif kind == "causal_lm":
        # the core's tensor_parallel (DTensor); Gaudi's adapter uses DeepSpeed instead
        need("torch.distributed.device_mesh", "init_device_mesh")
        need("torch.distributed.tensor.parallel", "ColwiseParallel", "RowwiseParallel",
             "parallelize_module")  # fmt: skip
        need("torch.distributed.tensor", "Replicate")
    if family == "cpu":  # the adapter's StoragePeak: the peak of the tensors' memory
        need("torch.multiprocessing.reductions", "StorageWeakRef")
        need("torch.utils._python_dispatch", "TorchDispatchMode")
        need("torch.utils._pytree", "tree_leaves")
    noqa = "  # noqa: E402" if family == "hpu" else ""  # after os.environ.setdefault
    lines = []
    for line in sorted(plain):
        suffix = noqa + ', F401 (registers "hccl")' if line.endswith(".hccl") else noqa
        lines.append(line + suffix)
    for module in sorted(names):
        # isort's order: constants, classes, then functions (case-sensitive)
        items = sorted(names[module], key=lambda n: (not n.isupper(), not n[0].isupper(), n))
        line = f"from {module} import {', '.join(items)}"
        if len(line + noqa) <= 88:
            lines.append(line + noqa)
        else:
            lines.append(f"from {module} import ({noqa}")
            lines += [f"    {item}," for item in items]
            lines.append(")")
    return lines


def _hpu_mode(plan: Plan) -> dict:
    lazy = plan.tuning.hpu_mode == "lazy"
    if lazy:
        comment = "Lazy mode: ops are queued and run as one graph at each htcore.mark_step()."
    elif plan.tuning.compile != "off":
        comment = "Eager mode with torch.compile(backend='hpu_backend'), as the plan chose."
    else:
        comment = "Eager mode: each op runs as it is called, no graph compiler."
    return {"hpu_lazy_mode": "1" if lazy else "0", "hpu_mode_comment": comment}


def render_program(plan: Plan, env: jinja2.Environment | None = None) -> str:
    family, kind, workload = plan.target.family, plan.model.kind, plan.workload.kind
    what = {"mmdit": "MMDiT", "causal_lm": "causal LM", "sd3": "SD3 pipeline", "flux": "Flux transformer",
            "flux_pipeline": "Flux pipeline"}[kind]  # fmt: skip
    measured = {
        "train": "training throughput",
        "infer": "generation throughput and latency" if kind == "causal_lm" else "seconds per image",
    }[workload]
    title = (
        f"{plan.experiment} on {plan.target.name}, point {plan.point}"
        f"{' (smoke)' if plan.smoke else ''}: {what} {measured}."
    )
    context = {
        "title": title,
        "version": __version__,
        "family": family,
        "target": plan.target.name,  # a name from the target table, not from the spec
        "kind": kind,
        "workload": plan.workload.kind,
        "imports": import_lines(
            family,
            kind,
            workload,
            plan.dims.deepspeed,
            plan.runtime,
            grouped_llama(plan),
            plan.checkpoint is not None,
            weights_by_rank(plan),
        ),
        "checkpoint": plan.checkpoint is not None,
        "local_weights": weights_by_rank(plan),
        "weights_file": "diffusion_pytorch_model.safetensors" if kind == "flux" else "model.safetensors",
        "deepspeed": plan.dims.deepspeed,
        "model_core": f"model_{kind}.py.j2",
        "grouped_attention": grouped_llama(plan),
        "core": "core_train.py.j2" if workload == "train" else ENTRIES[kind][0],
        "runtime": plan.runtime,
        "entry": "train" if workload == "train" else ENTRIES[kind][1],
        "plan": program_settings(plan),
        "metrics_version": METRICS_SCHEMA_VERSION,
        "gaudi_class": GAUDI_CLASSES.get(getattr(plan.model, "model_type", ""), ""),
        "gaudi_always_fused": getattr(plan.model, "model_type", "") in GAUDI_ALWAYS_FUSED,
        "pipeline": kind in PIPELINES,
        "pipeline_class": PIPELINE_CLASSES.get((kind, "hpu" if family == "hpu" else ""), ""),
        "pipeline_name": {"sd3": "SD3", "flux_pipeline": "Flux"}.get(kind, ""),
        "pipeline_transformer": TRANSFORMER_CLASSES.get(kind),
        "transformer_name": TRANSFORMER_NAMES.get(kind, ""),
        "extra_requirements": (" and transformers" if kind == "causal_lm" else " and diffusers")
        + (" and transformers" if kind in PIPELINES else "")
        + (",\nhabana_frameworks and optimum-habana" if family == "hpu" else ""),
        **_hpu_mode(plan),
    }
    return (env or environment()).get_template("program.py.j2").render(context)
