"""Per-device memory of one plan, part by part, against the target's memory. No torch.

One job: the bytes each device holds at its peak — weights, gradients, optimizer state,
working copies, activations, KV cache — as the generated programs really keep them, and
whether their sum fits the target's `memory_gb`. Every formula, with its assumptions and what
it leaves out, is in docs/estimate.md; in brief (P parameters, N the data-parallel degree,
b bytes of the compute precision: 2 for bf16/fp16, 4 for fp32):

training, the model built in fp32 (torch's default) then:
- sharding none (one device, or DDP): fp32 weights 4P, fp32 gradients 4P, AdamW moments 8P;
  DDP's gradient buckets another 4P unless gradient_as_bucket_view (the Gaudi adapter sets
  it); autocast's cached low-precision weight copies bP (saved for the backward)
- fsdp (FSDP2, world > 1): 4P/N weights, 4P/N gradients, 8P/N moments (the sharded fp32
  parameters are the master weights), plus the gathered working set: the root group
  (embeddings, head) and two blocks in b, and one block's gradient in b and in fp32
- zero1/2/3 (DeepSpeed, the model cast to b): weights bP (P/N for ZeRO-3); gradients bP
  (P/N from ZeRO-2) plus the fp32 gradient partition of the step 4P/N; fp32 master 4P/N and
  moments 8P/N; the reduce bucket (5e8 elements, allocated whole); for ZeRO-3 the gathered
  blocks
activations: a per-layer formula in bytes per token (_mmdit_block, _llama_layer), x tokens x
micro batch; with activation checkpointing each layer keeps only its input, and one layer is
recomputed at a time.
inference: weights in b (tensor parallel splits each layer's projections, embeddings and head
replicated); the static KV cache 2 x layers x batch x kv_heads/t x head_dim x (in + out) x b;
a working set for the largest transient tensors.
build: where the program builds the whole model (training: fp32) before sharding or splitting
it (not on the meta device, not under ZeRO-3), 4P on every device; the peak is the larger of
that and the steady parts above.

capacity: the target's `memory_gb`; the cpu target states none, so its capacity is this host's
physical memory shared by the node's processes (host / devices_per_node per process), read by
host_memory() when estimated and never written into a plan.

The parallel layout (world size, effective sharding, DeepSpeed's stage, the meta-device build)
is read from plan.dims (plan/parallel.py), never derived here. The module is over 400 lines
because each part's formula sits beside its docstring, which docs/estimate.md follows: splitting
them would separate parts the one estimate adds up.
"""

from __future__ import annotations

import math
import os

from ..catalog.sd3_components import FULL, SMOKE
from ..records import frozen
from .flops import MLP_RATIO, llama_params, mmdit_params
from .types import InferWorkload, LlamaModel, MMDiTModel, Plan, SD3Pipeline

GB = 1e9  # decimal, as the vendors state memory_gb
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
FP32 = 4
OPTIMIZER_STATES = {"adamw": 2, "adam": 2}  # fp32 tensors per parameter (exp_avg, exp_avg_sq)
ZERO_REDUCE_BUCKET = 500_000_000  # DeepSpeed's default reduce_bucket_size, in elements
TIGHT = 0.9  # a total above this share of the device's memory leaves little for the runtime
HOST_MEMORY_VARIABLE = "BENCHC_HOST_MEMORY_BYTES"  # stands for this host's memory (tests, other hosts)


@frozen
class Part:
    name: str
    bytes: float
    formula: str  # how it is counted, for the reader


@frozen
class Memory:
    parts: tuple[Part, ...]
    capacity: float | None  # bytes of the target's memory; None: unknown
    activations_off: float | None = None  # training: activations without checkpointing
    activations_on: float | None = None  # ... and with it
    build: float = 0.0  # the model built whole before it is sharded or split
    host: float | None = None  # cpu: this host's memory, of which capacity is one process's share
    processes: int = 1  # cpu: the processes of one node, which share the host's memory

    @property
    def steady(self) -> float:
        """The parts held together while the timed work runs."""
        return sum(p.bytes for p in self.parts)

    @property
    def total(self) -> float:
        """The peak: the steady state, or the build before it where that is larger."""
        return max(self.steady, self.build)

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.total <= self.capacity

    @property
    def tight(self) -> bool:
        return bool(self.capacity) and TIGHT * self.capacity < self.total <= self.capacity

    def part(self, name: str) -> float:
        return sum(p.bytes for p in self.parts if p.name == name)


# ------------------------------------------------------------------ parameters


def _clip_params(c: dict) -> int:
    """transformers' CLIPTextModelWithProjection: embeddings, layers, final norm, projection."""
    h, i = c["hidden_size"], c["intermediate_size"]
    layer = 4 * (h * h + h) + 2 * 2 * h + (h * i + i) + (i * h + h)  # q k v out, 2 norms, MLP
    embed = c["vocab_size"] * h + c["max_position_embeddings"] * h
    return embed + c["num_hidden_layers"] * layer + 2 * h + h * c["projection_dim"]


def _t5_encoder_params(c: dict) -> int:
    """transformers' T5EncoderModel (gated FF, no biases, relative bias in layer 0)."""
    d, inner = c["d_model"], c["num_heads"] * c["d_kv"]
    layer = 4 * d * inner + 3 * d * c["d_ff"] + 2 * d
    return c["vocab_size"] * d + c["num_layers"] * layer + 32 * c["num_heads"] + d


def _vae_params(c: dict) -> int:
    """diffusers' AutoencoderKL without quant convs: encoder and decoder, each with a mid block
    of two resnets and one attention."""
    conv = lambda k, cin, cout: k * k * cin * cout + cout  # noqa: E731
    resnet = lambda cin, cout: (2 * cin + conv(3, cin, cout) + 2 * cout + conv(3, cout, cout)  # noqa: E731
                                + (conv(1, cin, cout) if cin != cout else 0))  # fmt: skip
    channels, layers, z = c["block_out_channels"], c["layers_per_block"], c["latent_channels"]
    top = channels[-1]
    mid = 2 * resnet(top, top) + 2 * top + 4 * (top * top + top)
    encoder = conv(3, c["in_channels"], channels[0]) + mid + 2 * top + conv(3, top, 2 * z)
    previous = channels[0]
    for index, out in enumerate(channels):
        encoder += resnet(previous, out) + (layers - 1) * resnet(out, out)
        encoder += conv(3, out, out) if index < len(channels) - 1 else 0
        previous = out
    decoder = conv(3, z, top) + mid + 2 * channels[0] + conv(3, channels[0], c["out_channels"])
    previous = top
    for index, out in enumerate(reversed(channels)):
        decoder += resnet(previous, out) + layers * resnet(out, out)
        decoder += conv(3, out, out) if index < len(channels) - 1 else 0
        previous = out
    return encoder + decoder


def parameters(plan: Plan) -> dict[str, int]:
    """Parameters per part of the model: the transformer, and for SD3 the pipeline's others."""
    model = plan.model
    counts = {"transformer": plan.cost.params}
    if isinstance(model, SD3Pipeline):
        parts = SMOKE if plan.smoke else FULL
        counts["clip_l"] = _clip_params(parts["clip_l"])
        counts["clip_g"] = _clip_params(parts["clip_g"])
        if "t5" in model.text_encoders:
            counts["t5"] = _t5_encoder_params(parts["t5"])
        counts["vae"] = _vae_params(parts["vae"])
    return counts


def block_and_root(plan: Plan) -> tuple[int, int]:
    """Parameters of one repeated block (a joint block or a decoder layer) and of the rest."""
    m, total = plan.model, plan.cost.params
    if isinstance(m, LlamaModel):
        shape = (m.hidden, m.layers, m.heads, m.kv_heads, m.intermediate, m.vocab)
        block = total - llama_params(m.hidden, m.layers - 1, *shape[2:], head_dim=m.head_dim)
        return block, total - m.layers * block
    t = m.transformer if isinstance(m, SD3Pipeline) else m
    args = (t.hidden, t.patch, t.in_channels, t.joint_attention_dim, t.pooled_projection_dim,
            t.head_dim, t.qk_norm)  # fmt: skip
    block = mmdit_params(t.depth + 1, *args) - mmdit_params(t.depth, *args)
    return block, max(0, total - t.depth * block)


def local_weights(plan: Plan) -> float:
    """Parameters one device holds for inference: tensor parallel splits each layer's
    projections t ways; norms, embeddings and the output head stay whole on every device."""
    m, t = plan.model, plan.dims.tensor
    if not isinstance(m, LlamaModel) or not plan.dims.tensor_parallel:
        return float(sum(parameters(plan).values()))
    block, root = block_and_root(plan)
    norms = 2 * m.hidden
    return m.layers * ((block - norms) / t + norms) + root


# ------------------------------------------------------------------ building the model


def whole_build(plan: Plan) -> float:
    """Bytes each device holds when the program builds the whole model before sharding or
    splitting it: training in fp32 (the master weights), inference in its precision (built
    on the device in it, never cast after); 0 where it builds on the meta device or
    DeepSpeed's ZeRO-3 partitions each parameter as it is created."""
    w, dims = plan.workload, plan.dims
    if isinstance(w, InferWorkload):
        # unsplit, the model built is the weights themselves: nothing before the steady state
        whole = dims.tensor_parallel and not dims.meta_init
        return BYTES[w.precision] * sum(parameters(plan).values()) if whole else 0.0
    if dims.zero_stage == 3 and dims.distributed:
        return 0.0
    if dims.fsdp:
        # on the meta device; under accelerate, rank 0 builds in host memory and sends shards
        if plan.runtime == "accelerate" or dims.meta_init:
            return 0.0
    return FP32 * plan.cost.params


# ------------------------------------------------------------------ training states


def optimizer_states(plan: Plan) -> int:
    """fp32 state tensors per parameter: AdamW/Adam two moments, SGD one with momentum."""
    o = plan.workload.optimizer
    if o.name == "sgd":
        return 1 if float(o.args.get("momentum", 0) or 0) else 0
    return OPTIMIZER_STATES.get(o.name, 2)


def training_states(plan: Plan) -> list[Part]:
    p, dims = plan.cost.params, plan.dims
    n, b = dims.data, BYTES[plan.workload.precision]
    k = optimizer_states(plan) * FP32
    sharding = dims.effective_sharding
    block, root = block_and_root(plan)
    name = plan.workload.optimizer.name
    if sharding == "none":
        parts = [Part("weights", 4 * p, "fp32 parameters: 4 B x P"),
                 Part("gradients", 4 * p, "fp32 gradients: 4 B x P"),
                 Part("optimizer", k * p, f"{name}: {k} B x P of fp32 state")]  # fmt: skip
        if dims.distributed and plan.target.family != "hpu":
            parts.append(
                Part("buckets", 4 * p, "DDP's gradient buckets (no gradient_as_bucket_view): 4 B x P")
            )
        if b < FP32:
            parts.append(Part("working", b * p, f"autocast's {b}-byte weight copies, kept for the backward"))
        return parts
    if sharding == "fsdp":
        gathered = b * (root + 2 * block) + (b + FP32) * block
        return [Part("weights", 4 * p / n, "fp32 parameter shards (the master weights): 4 B x P / N"),
                Part("gradients", 4 * p / n, "fp32 gradient shards: 4 B x P / N"),
                Part("optimizer", k * p / n, f"{name}: {k} B x P / N"),
                Part("working", gathered, f"FSDP2 gathered: root and 2 blocks in {b} B, one block's "
                     f"gradient in {b} B and fp32")]  # fmt: skip
    stage = dims.zero_stage
    master = FP32  # DeepSpeed's flat fp32 partition, a copy even of an fp32 model
    weights_n, grads_n = (n if stage == 3 else 1), (n if stage >= 2 else 1)
    parts = [
        Part("weights", b * p / weights_n, f"{b}-byte parameters" + (" / N" if stage == 3 else "")),
        Part("gradients", b * p / grads_n + FP32 * p / n,
             f"{b}-byte gradients{' / N' if stage >= 2 else ''}, + the step's fp32 partition 4 B x P / N"),
        Part("optimizer", (master + k) * p / n, f"fp32 master weights, {name} state: {master + k} B x P / N"),
        # allocated whole, whatever the model's size (measured: tests/test_memory_estimate.py)
        Part("buckets", b * ZERO_REDUCE_BUCKET, f"DeepSpeed's reduce bucket: {b} B x 5e8 elements"),
    ]  # fmt: skip
    if stage == 3:
        parts.append(
            Part("working", b * 3 * block, f"ZeRO-3 gathered: 2 blocks and one block's gradient in {b} B")
        )
    return parts


# ------------------------------------------------------------------ activations


def _dtypes(plan: Plan) -> tuple[int, int, int]:
    """(b, n, r): bytes of matmul activations, of layer-norm tensors (fp32 under autocast),
    and of the residual stream (fp32 when fp32 weights meet autocast: sharding none)."""
    b = BYTES[plan.workload.precision]
    sharding = plan.dims.effective_sharding
    autocast = sharding != "fsdp" and b < FP32  # FSDP2 casts the weights instead
    n = FP32 if autocast or b == FP32 else b
    r = FP32 if sharding == "none" or b == FP32 else b
    return b, n, r


def eager_attention(plan: Plan) -> bool:
    """Attention that materialises its score matrix (Gaudi's Llama without FusedSDPA too)."""
    w = plan.workload
    hpu_llama = isinstance(plan.model, LlamaModel) and plan.target.family == "hpu"
    return w.attention == "eager" or (hpu_llama and w.attention != "fused")


def _mmdit_block(plan: Plan, m: MMDiTModel, image: int, text: int) -> dict[str, float]:
    """Bytes saved for the backward by one joint block, per token (diffusers'
    JointTransformerBlock): per stream two LayerNorms (input and normalised output, n B each),
    the modulated input of q/k/v, q k v, the out projection's input and output (the gate
    multiplies it), the modulated MLP input, fc1 output, GELU output, fc2 output: 4nh + 16bh;
    the last block's text side only norm and q k v: 2nh + 4bh; every token the attention
    output bh plus the softmax statistics (4 B per head) or, for eager attention, the scores
    (b x heads x S); qk RMSNorm adds 2h(4 + b) per stream token."""
    b, n, _ = _dtypes(plan)
    h, s = m.hidden, image + text
    attend = b * m.heads * s if eager_attention(plan) else FP32 * m.heads
    joint = b * h + attend + (2 * h * (FP32 + b) if m.qk_norm == "rms_norm" else 0)
    full = 4 * n * h + 16 * b * h + joint
    return {"full": full, "last_text": 2 * n * h + 4 * b * h + joint, "head": (2 * n + b) * h}


def _llama_layer(plan: Plan, m: LlamaModel, tokens: int) -> dict[str, float]:
    """Bytes saved by one decoder layer, per token (transformers' LlamaDecoderLayer): two
    RMSNorms, each its fp32 upcast, the normalised output and the weighted output,
    (4 + r + b)h; q, k, v after RoPE, the attention output and the o_proj input copy,
    b(3q + 2 kv) (q = heads x head_dim, = h unless head_dim is set); the MLP's gate, SiLU, up
    and product, 4bi; the softmax statistics (4 B per head) or, for eager attention, the fp32
    scores and their copy (4 + b) x heads x S and the repeated k and v. The head: final norm
    and the logits in b, their fp32 copy and log-softmax, (b + 8) x vocab."""
    b, _, r = _dtypes(plan)
    h, q, kv = m.hidden, m.heads * m.head_dim, m.kv_heads * m.head_dim
    attend = FP32 * m.heads
    if eager_attention(plan):
        attend = (FP32 + b) * m.heads * tokens + b * 2 * (q - kv)
    layer = 2 * (FP32 + r + b) * h + b * (3 * q + 2 * kv) + 4 * b * m.intermediate + attend
    return {"layer": layer, "head": (FP32 + r + b) * h + (b + 8) * m.vocab}


def training_activations(plan: Plan, checkpointing: bool) -> float:
    """Activations per device at the start of the backward, for one micro batch."""
    w, m = plan.workload, plan.model
    _, _, r = _dtypes(plan)
    if isinstance(m, LlamaModel):
        per = _llama_layer(plan, m, w.seq_len)
        kept = m.layers * (r * m.hidden if checkpointing else per["layer"])
        per_sample = w.seq_len * (kept + (per["layer"] if checkpointing else 0) + per["head"])
    else:
        image, text = w.image_tokens, m.text_tokens
        per = _mmdit_block(plan, m, image, text)
        blocks = m.depth * image * per["full"] + (m.depth - 1) * text * per["full"]
        blocks += text * per["last_text"]
        if checkpointing:  # each block keeps its inputs; one is recomputed at a time
            blocks = m.depth * (image + text) * r * m.hidden + (image + text) * per["full"]
        per_sample = blocks + image * per["head"]
    return w.micro_batch * per_sample


# ------------------------------------------------------------------ inference


def kv_cache(plan: Plan) -> float:
    """transformers' static cache (and optimum-habana's): keys and values of every layer for
    input + output tokens, this device's share of the KV heads, in the model's precision."""
    m, w = plan.model, plan.workload
    if not isinstance(m, LlamaModel):
        return 0.0
    heads = m.kv_heads / plan.dims.tensor
    return (
        2.0
        * m.layers
        * w.batch
        * heads
        * m.head_dim
        * (w.input_tokens + w.output_tokens)
        * BYTES[w.precision]
    )


def inference_working(plan: Plan) -> tuple[float, str]:
    """The largest transient tensors of an inference call (no activations are kept)."""
    m, w = plan.model, plan.workload
    b, t = BYTES[w.precision], plan.dims.tensor
    if isinstance(m, LlamaModel):
        tokens = w.batch * w.input_tokens
        working = tokens * (2 * m.hidden + 3 * m.intermediate / t) * b
        if eager_attention(plan):
            working += w.batch * m.heads / t * w.input_tokens**2 * (FP32 + b)
        scores = ", + one layer's scores" if eager_attention(plan) else ""
        return working, f"prefill: batch x input x (2h + 3i/t) x b{scores}"
    tr = m.transformer
    passes = 2 if w.classifier_free_guidance else 1
    mmdit = passes * w.batch * (w.image_tokens + tr.text_tokens) * (4 + 2 * MLP_RATIO) * tr.hidden * b
    vae = (SMOKE if plan.smoke else FULL)["vae"]
    side = w.resolution
    stages = [c * (side // 2**i) ** 2 for i, c in enumerate(vae["block_out_channels"])]
    stages.append(vae["block_out_channels"][1] * side * side)  # the last upsampler's output
    decode = 3 * w.batch * max(stages) * b
    if decode > mmdit:
        return decode, "VAE decode: 3 tensors of its widest stage (batch x channels x pixels x b)"
    return mmdit, "an MMDiT pass: 12h per token x (CFG) batch x tokens x b"


# ------------------------------------------------------------------ the estimate


def host_memory() -> float | None:
    """This host's physical memory in bytes: BENCHC_HOST_MEMORY_BYTES where set to a positive
    number, else sysconf's pages x page size, else /proc/meminfo's MemTotal; None if none answers.
    Only fit verdicts read it (check's warnings, estimate), never a plan or a generated file."""
    try:
        value = float(os.environ.get(HOST_MEMORY_VARIABLE, "") or "nan")
        if math.isfinite(value) and value > 0:
            return value
    except ValueError:
        pass  # not a number: as if unset
    try:
        value = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if value > 0:
            return float(value)
    except (AttributeError, ValueError, OSError):
        pass
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _capacity(plan: Plan) -> dict:
    """Memory's capacity fields: the target's memory, or on the cpu this host's, shared by the
    node's processes (each holds its own copy of the parts)."""
    t = plan.target
    if t.memory_gb is not None:
        return {"capacity": t.memory_gb * GB}
    host = host_memory() if t.family == "cpu" else None
    if host is None:
        return {"capacity": None}
    processes = plan.dims.devices_per_node
    return {"capacity": host / processes, "host": host, "processes": processes}


def estimate_memory(plan: Plan) -> Memory:
    """Every part on one device at its peak, and the target's memory (None: unknown)."""
    capacity = _capacity(plan)
    if isinstance(plan.workload, InferWorkload):
        b = BYTES[plan.workload.precision]
        where = f" / tensor {plan.dims.tensor} (layers)" if plan.dims.tensor_parallel else ""
        parts = [Part("weights", b * local_weights(plan), f"{b} B x parameters{where}")]
        cache = kv_cache(plan)
        if cache:
            parts.append(
                Part("kv_cache", cache, "2 x layers x batch x kv_heads/t x head_dim x (in + out) x b")
            )
        working, how = inference_working(plan)
        parts.append(Part("activations", working, how))
        return Memory(tuple(parts), build=whole_build(plan), **capacity)
    off = training_activations(plan, False)
    on = training_activations(plan, True)
    checkpointing = plan.parallel.activation_checkpointing
    how = "layer inputs + one layer recomputed" if checkpointing else "every layer's saved tensors"
    batch = plan.workload.micro_batch
    parts = [
        *training_states(plan),
        Part("activations", on if checkpointing else off, f"micro batch {batch}: {how}"),
    ]
    return Memory(tuple(parts), activations_off=off, activations_on=on, build=whole_build(plan), **capacity)
