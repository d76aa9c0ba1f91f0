"""The typed, frozen, fully resolved plan of one (target, sweep point): what code generation reads.

Every field is a plain value (no spans, no defaults left to fill). `Plan.to_dict()` is the
JSON form written by `benchc plan --json` and into each build's manifest. `Plan.dims` is the
plan's parallel layout (plan/parallel.py), derived from its fields once and kept on it, outside
that JSON.
"""

from __future__ import annotations

from functools import cached_property

from ..catalog.targets import Target
from ..records import as_dict, frozen
from .census import Census, FluxCensus
from .flops import ModelCost
from .parallel import ParallelDims
from .tuning import Tuning

PLAN_SCHEMA_VERSION = 1


@frozen
class MMDiTModel:
    """diffusers' SD3Transformer2DModel. hidden = heads * head_dim (64 * depth for SD3)."""

    preset: str | None
    depth: int
    heads: int
    head_dim: int
    hidden: int
    patch: int
    in_channels: int
    joint_attention_dim: int
    caption_projection_dim: int
    pooled_projection_dim: int
    pos_embed_max_size: int
    qk_norm: str
    text_tokens: int  # text context per sample: CLIP-L/G (77) + T5 (77)
    weights: str | None
    kind: str = "mmdit"


@frozen
class SD3Pipeline:
    """The whole text-to-image pipeline: MMDiT transformer, VAE and text encoders."""

    transformer: MMDiTModel
    text_encoders: tuple[str, ...]
    t5_tokens: int
    weights: str | None
    kind: str = "sd3"


@frozen
class CausalLM:
    """A transformers causal LM (AutoModelForCausalLM of `model_type`), its shape as the built
    config holds it. `census` is what the model holds, counted on the meta device
    (plan/census.py): parameters, FLOPs and memory derive from it, never from a formula per
    family. intermediate is the MLP's width, each expert's in a mixture of experts."""

    preset: str | None
    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_positions: int
    experts: int  # 0: dense
    experts_per_token: int
    sliding_window: int | None  # the largest window of any layer; None: full attention
    rope_theta: float | None
    tie_embeddings: bool
    weights: str | None
    config: str  # the transformers config the program builds (JSON, config.json's form)
    census: Census
    kind: str = "causal_lm"

    @property
    def mlp_width(self) -> int:
        """The MLP activations one token makes: intermediate, times the experts it is routed to."""
        return self.intermediate * (self.experts_per_token if self.experts else 1)

    @property
    def mlp_params(self) -> int:
        """Parameters of one layer's MLP (every expert and the router) and the norm before it."""
        if self.experts:
            return self.census.expert_matmul // self.layers + self.hidden * self.experts + self.hidden
        return 3 * self.hidden * self.intermediate + self.hidden


@frozen
class FluxModel:
    """diffusers' FluxTransformer2DModel: `depth` double-stream blocks (image and text tokens
    with their own weights, attending jointly), then `single_depth` single-stream blocks over
    both. Latents are packed 2 x 2 (patch), 16 channels into 64. Counted on the meta device
    (census)."""

    preset: str | None
    depth: int
    single_depth: int
    heads: int
    head_dim: int
    hidden: int
    joint_attention_dim: int
    pooled_projection_dim: int
    guidance: bool  # embeds the distilled guidance value (dev), or not (schnell)
    text_tokens: int  # T5 tokens per sample: the training batch's, the pipeline's maximum
    weights: str | None
    config: str  # FluxTransformer2DModel's keyword arguments, JSON
    census: FluxCensus
    patch: int = 2  # latents packed 2 x 2 into tokens
    in_channels: int = 64
    kind: str = "flux"


@frozen
class FluxPipeline:
    """The whole Flux text-to-image pipeline (diffusers' FluxPipeline): the transformer, the
    VAE, CLIP-L and T5."""

    transformer: FluxModel
    weights: str | None
    kind: str = "flux_pipeline"

    @property
    def t5_tokens(self) -> int:
        return self.transformer.text_tokens


Model = MMDiTModel | SD3Pipeline | CausalLM | FluxModel | FluxPipeline


@frozen
class Optimizer:
    name: str
    args: dict[str, object]


@frozen
class TrainWorkload:
    precision: str
    attention: str
    micro_batch: int  # per device, per forward/backward
    grad_accum: int
    global_batch: int  # micro_batch * grad_accum * data degree
    optimizer: Optimizer
    steps: int  # optimizer steps in all, warmup included
    warmup: int  # steps run before timing starts
    objective: str  # rectified_flow | causal_lm
    grad_clip: float | None
    compile: bool | None  # the spec's train.compile; None: not written, the tier decides
    seed: int
    resolution: int | None  # image models: pixels per side
    latent_size: int | None  # resolution / 8 (VAE downsampling)
    image_tokens: int | None  # (latent_size / patch) ** 2
    seq_len: int | None  # language models: tokens per sample
    kind: str = "train"

    @property
    def measured_steps(self) -> int:
        return self.steps - self.warmup


@frozen
class InferWorkload:
    precision: str
    attention: str
    batch: int
    steps: int  # timed iterations plus warmup
    warmup: int
    compile: bool | None  # the spec's infer.compile; None: not written, the tier decides
    graphs: bool  # HPU graphs on Gaudi, CUDA graphs on CUDA
    seed: int
    resolution: int | None
    latent_size: int | None
    image_tokens: int | None
    denoising_steps: int | None
    guidance: float | None
    classifier_free_guidance: bool | None  # guidance > 1 doubles the transformer batch
    input_tokens: int | None
    output_tokens: int | None
    kv_cache: str | None
    # generation with a static KV cache: attention reads the keys up to the filled length rounded
    # up to this many (benchc's decode loop: one CUDA graph per bucket; optimum-habana's
    # buckets); None where the plan has no such cache
    decode_bucket: int | None = None
    kind: str = "infer"


Workload = TrainWorkload | InferWorkload


@frozen
class Cluster:
    nodes: int
    devices_per_node: int
    world_size: int


@frozen
class Parallel:
    data: int
    tensor: int
    pipeline: int
    sharding: str
    activation_checkpointing: bool


@frozen
class Measure:
    metric: str
    repeat: int
    timeout_s: float
    profile: bool = False  # a few more steps after the measured ones, under torch.profiler


@frozen
class Slurm:
    """The spec's `slurm { }` block: what job.sbatch asks of the scheduler. `benchc submit`
    flags (and any option given to sbatch) win over these."""

    requested: bool  # the spec has a slurm block: write job.sbatch for every target
    partition: str | None
    account: str | None
    time: str | None  # Slurm's time format; None: derived from measure (repeat x timeout)
    gres: str | None  # a generic-resource request such as "gpu:8" or "hpu:8"; None: none
    exclusive: bool
    job_name: str | None
    log: str  # the job's output file, relative to the build point (%j = job id)


@frozen
class Reference:
    label: str
    target: str
    value: float
    unit: str
    source: str | None
    where: dict[str, object]  # dotted setting -> value the point must have


@frozen
class PriceList:
    """The spec's `prices` block: what one device of a target costs for one hour (the user's
    figures; benchc ships none). Reports use it when no --prices FILE is given."""

    currency: str
    per_device_hour: tuple[tuple[str, float], ...]  # (target, price), sorted by target


@frozen
class SpecInfo:
    path: str
    sha256: str
    files: tuple[tuple[str, str], ...]  # (path, sha256) of the spec and every included file


@frozen
class Plan:
    experiment: str
    description: str | None
    target: Target
    point: str  # directory-safe name of the sweep point, "default" when there is no sweep
    point_values: tuple[tuple[str, object], ...]  # (dotted setting, value) of this point
    smoke: bool
    model: Model
    workload: Workload
    cluster: Cluster
    parallel: Parallel
    measure: Measure
    slurm: Slurm
    references: tuple[Reference, ...]  # the spec's published figures that apply to this point
    declared_references: tuple[Reference, ...]  # every one the spec declares (reports say why not)
    spec: SpecInfo
    overrides: tuple[str, ...]  # the --set arguments, as given
    cost: ModelCost | None  # parameters and model FLOPs per sample (None: not modelled yet)
    prices: PriceList | None = None  # the spec's prices block (None: none)
    runtime: str = "torch"  # what drives training: torch itself, or accelerate's Accelerator
    tuning: Tuning | None = None  # the optimisation tier and the knobs it turned on (tuning.py)
    # the weights folder the program checks (safetensors headers against the model its config
    # builds) before it runs: the one it loads, or under --smoke the one the full run will load
    checkpoint: str | None = None
    schema_version: int = PLAN_SCHEMA_VERSION

    @cached_property
    def dims(self) -> ParallelDims:
        """The parallel layout: world size, degrees, DeepSpeed or FSDP, meta-device build.
        Derived on first use (lower.build asks at once, so its invariants are checked where the
        plan is made) and kept: not a field, so not in to_dict, eq or hash; a plan made by
        dataclasses.replace derives its own."""
        return ParallelDims.of(self)

    def to_dict(self) -> dict:
        data = as_dict(self)  # dataclasses.asdict, without deep copies of plain values
        data["point_values"] = dict(self.point_values)
        data["spec"]["files"] = [{"path": p, "sha256": h} for p, h in self.spec.files]
        if isinstance(self.workload, TrainWorkload):
            data["workload"]["measured_steps"] = self.workload.measured_steps
        if self.prices is not None:
            data["prices"]["per_device_hour"] = dict(self.prices.per_device_hour)
        return data
