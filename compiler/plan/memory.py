"""Per-device memory of one plan, part by part, against the target's memory. No torch.

One job: the bytes each device holds at its peak — weights, gradients, optimizer state,
working copies, activations, KV cache — as the generated programs really keep them, and
whether their sum fits the target's `memory_gb`. Every formula, with its assumptions and what
it leaves out, is in docs/estimate.md; in brief (P parameters, N the data-parallel degree,
b bytes of the compute precision: 2 for bf16/fp16, 4 for fp32):

training: the peak of a step is the largest of its moments (training_phases), each summing
what is held then: the forward's end (every unit's saved tensors), each unit of the backward
(the head, each block's MLP then its attention, the embeddings: the gradients made so far,
the saved tensors not yet freed, and under FSDP2 the all-gather, compute and reduce-scatter
of each block) and the optimizer step. The parts listed are those of that moment (Memory.phase):
- sharding none (one device, or DDP): fp32 weights 4P and AdamW moments 8P throughout; fp32
  gradients 4P only from the backward (or from the first micro batch's: grad_accum > 1);
  DDP's gradient buckets 4P unless gradient_as_bucket_view (the Gaudi adapter sets it: the
  gradients are then the buckets); autocast's b-byte weight copies, saved for the backward
- fsdp (FSDP2, world > 1): 4P/N weights and 8P/N moments; the root gathered in b; per block
  its gathered parameters, the next block's, its gradients in b and the reduce-scatter's
  fp32 buffers (x 2 on the CPU: gloo's copy); 4P/N gradient shards as the blocks reduce (all
  of them from the start where earlier micro batches reduced theirs: every micro batch does)
- zero1/2/3 (DeepSpeed, the model cast to b): weights bP (bP/N for ZeRO-3, with a b-byte
  gradient partition); fp32 master and moments (4 + 8)P/N; the reduce bucket (5e8 elements,
  allocated whole) and its flattened gradients; gradients bP (ZeRO-1) or an fp32 partition
  (ZeRO-2; ZeRO-1 and 3 at the step); for ZeRO-3 the parameters gathered
activations: a per-layer formula in bytes per token (_mmdit_block, _llama_layer), x tokens x
micro batch; with activation checkpointing each layer keeps only its input, and one layer is
recomputed at a time. Beside them the synthetic batch, the loss's tensors and the model's
buffers (the MMDiT's position table).
inference: weights in b (tensor parallel splits each layer's projections, embeddings and head
replicated); the static KV cache 2 x layers x batch x kv_heads/t x head_dim x (in + out) x b;
a working set for the largest transient tensors; for SD3 what the pipeline call holds (its
text context is CLIP's 77 tokens + t5_tokens, not the MMDiT's text_tokens).
build: where the program builds the whole model (training: fp32) before sharding or splitting
it (not on the meta device, not under ZeRO-3), 4P on every device and what the build makes
beside it; the peak is the larger of that and the steady parts above.

Checked against real CPU runs (tests/test_memory_estimate.py): every layout's traced peak is
at most the estimate and at least 0.9 of it.

capacity: the target's `memory_gb`; the cpu target states none, so its capacity is this host's
physical memory shared by the node's processes (host / devices_per_node per process), read by
host_memory() when estimated and never written into a plan.

The parallel layout (world size, effective sharding, DeepSpeed's stage, the meta-device build)
is read from plan.dims (plan/parallel.py), never derived here. The module is over 800 lines
because each part's formula sits beside its docstring, which docs/estimate.md follows: splitting
them would separate parts the one estimate adds up.
"""

from __future__ import annotations

import math
import os

from ..catalog.flux import FULL_PARTS as FLUX_FULL
from ..catalog.flux import SMOKE_PARTS as FLUX_SMOKE
from ..catalog.sd3_components import CLIP_TOKENS, FULL, SMOKE
from ..records import frozen
from .flops import MLP_RATIO, mmdit_params
from .memory_flux import double_block, single_block
from .types import CausalLM, FluxModel, FluxPipeline, InferWorkload, MMDiTModel, Plan, SD3Pipeline

GB = 1e9  # decimal, as the vendors state memory_gb
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
FP32 = 4
OPTIMIZER_STATES = {"adamw": 2, "adam": 2}  # fp32 tensors per parameter (exp_avg, exp_avg_sq)
ZERO_REDUCE_BUCKET = 500_000_000  # DeepSpeed's default reduce_bucket_size, in elements
ZERO3_LIVE = 1_000_000_000  # DeepSpeed's default stage3_max_live_parameters
ZERO3_PREFETCH = 50_000_000  # DeepSpeed's default stage3_prefetch_bucket_size, in elements
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
    phase: str = ""  # training: the moment of the step the parts are held together at (its peak)

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
    if isinstance(model, FluxPipeline):  # CLIP-L without a projection (Flux reads its pooled output)
        parts = FLUX_SMOKE if plan.smoke else FLUX_FULL
        counts["clip_l"] = _clip_params({**parts["clip_l"], "projection_dim": 0})
        counts["t5"] = _t5_encoder_params(parts["t5"])
        counts["vae"] = _vae_params(parts["vae"])
    return counts


def _text_side_difference(h: int) -> int:
    """Parameters a joint block's text side has beyond the last block's (context pre-only:
    its AdaLayerNormContinuous alone): the text stream's out projection, MLP and modulation."""
    linear = lambda n_in, n_out: n_in * n_out + n_out  # noqa: E731
    full = linear(h, h) + linear(h, MLP_RATIO * h) + linear(MLP_RATIO * h, h) + linear(h, 6 * h)
    return full - linear(h, 2 * h)


def block_and_root(plan: Plan) -> tuple[int, int]:
    """Parameters of one repeated block (a joint block or a decoder layer; the largest where
    they differ) and of the rest, the root: embeddings, final norm and head. The MMDiT's last
    block is smaller (its text side is context pre-only): counted as such, not as a full block."""
    m, total = plan.model, plan.cost.params
    if isinstance(m, CausalLM):  # counted on the meta device (plan/census.py)
        block = m.census.largest_layer
        return block, max(0, total - m.layers * block)
    if isinstance(m, FluxModel | FluxPipeline):  # a double-stream block is the larger
        census = m.census if isinstance(m, FluxModel) else m.transformer.census
        return census.double_block, census.root
    t = m.transformer if isinstance(m, SD3Pipeline) else m
    args = (t.hidden, t.patch, t.in_channels, t.joint_attention_dim, t.pooled_projection_dim,
            t.head_dim, t.qk_norm)  # fmt: skip
    block = mmdit_params(t.depth + 1, *args) - mmdit_params(t.depth, *args)
    last = block - _text_side_difference(t.hidden)
    return block, max(0, total - (t.depth - 1) * block - last)


def local_weights(plan: Plan) -> float:
    """Parameters one device holds for inference: tensor parallel splits each layer's
    projections t ways; norms, embeddings and the output head stay whole on every device."""
    m, t = plan.model, plan.dims.tensor
    if not isinstance(m, CausalLM) or not plan.dims.tensor_parallel:
        return float(sum(parameters(plan).values()))
    block, root = block_and_root(plan)
    norms = 2 * m.hidden
    return m.layers * ((block - norms) / t + norms) + root


# ------------------------------------------------------------------ building the model


def whole_build(plan: Plan) -> float:
    """Bytes each device holds when the program builds the whole model before sharding or
    splitting it: training in fp32 (the master weights) with its buffers, inference in its
    precision (built on the device in it, never cast after); 0 where it builds on the meta
    device or DeepSpeed's ZeRO-3 partitions each parameter as it is created. On top, what
    the build makes while the whole model is there: fused q/k/v projections (the qkv knob:
    each attention's fused layer is made before the separate ones are dropped, all of them,
    and the concatenation copied into the one being made), FSDP2's shards of one group; a
    tensor-parallel split, the largest projection whole (rank 0 copies its chunks to scatter
    them) and this rank's part of it."""
    w, dims, m = plan.workload, plan.dims, plan.model
    if isinstance(w, InferWorkload):
        # unsplit, the model built is the weights themselves: nothing before the steady state
        if not dims.tensor_parallel or dims.meta_init:
            return 0.0
        b, t = BYTES[w.precision], dims.tensor
        largest = m.hidden * max(m.heads * m.head_dim, m.mlp_width) if isinstance(m, CausalLM) else 0
        return b * sum(parameters(plan).values()) + b * largest * (1 + 1 / t)
    if dims.zero_stage == 3 and dims.distributed:
        return 0.0
    if dims.fsdp:
        # on the meta device; under accelerate, rank 0 builds in host memory and sends shards
        if plan.runtime == "accelerate" or dims.meta_init:
            return 0.0
    return FP32 * (plan.cost.params + _build_extra(plan)[0]) + model_buffers(plan, FP32)


def _build_extra(plan: Plan) -> tuple[float, str]:
    """Parameters' worth of what a training build makes beside the whole model, and what it is."""
    m, dims = plan.model, plan.dims
    fused = 0
    if plan.tuning is not None and plan.tuning.qkv == "fused" and isinstance(m, MMDiTModel):
        # q, k, v of both streams with biases, and the concatenation of the one being made
        fused = (2 * m.depth + 1) * 3 * m.hidden * (m.hidden + 1)
    block, _ = block_and_root(plan)
    sharding = block / dims.data if dims.fsdp else 0
    if fused >= sharding and fused:
        return fused, "the separate q/k/v projections while the fused ones are made"
    if sharding:
        return sharding, "FSDP2's shards of one block"
    return 0, ""


def build_formula(plan: Plan) -> str:
    """What `whole_build` counts, in words, for the estimate's table."""
    if isinstance(plan.workload, InferWorkload):
        return "b B x P, the largest projection whole and this rank's part of it"
    extra = _build_extra(plan)[1]
    buffers = ", and its buffers" if model_buffers(plan, FP32) else ""
    return "fp32, 4 B x P" + buffers + (f", with {extra}" if extra else "")


# ------------------------------------------------------------------ training: what the step holds


def optimizer_states(plan: Plan) -> int:
    """fp32 state tensors per parameter: AdamW/Adam two moments, SGD one with momentum."""
    o = plan.workload.optimizer
    if o.name == "sgd":
        return 1 if float(o.args.get("momentum", 0) or 0) else 0
    return OPTIMIZER_STATES.get(o.name, 2)


@frozen
class Unit:
    """One step of the backward, in its order: the parameters whose gradients it makes, the
    bytes its forward saved for it (freed when it is done), the bytes it makes again first
    (activation checkpointing's recompute, held while it runs), and autocast's weight copies
    a checkpointed block made in the forward (held in autocast's cache until the forward ends)."""

    name: str
    params: int
    saved: float
    recompute: float = 0.0
    cached: float = 0.0


def _head_params(plan: Plan) -> int:
    """The parameters the backward reaches first: Llama's final norm and output head, the
    MMDiT's final AdaLayerNorm and projection."""
    m = plan.model
    if isinstance(m, CausalLM):
        return m.vocab * m.hidden + m.hidden
    h = m.hidden
    if isinstance(m, FluxModel):  # AdaLayerNormContinuous (h -> 2h) and the projection to 64
        return (h * 2 * h + 2 * h) + (h * m.in_channels + m.in_channels)
    return (h * 2 * h + 2 * h) + (h * m.patch**2 * m.in_channels + m.patch**2 * m.in_channels)


def largest_parameter(plan: Plan) -> int:
    """Elements of the model's largest parameter: Llama's embedding or output head (or an MLP
    projection), the MMDiT's AdaLayerNorm modulation (h -> 6h) or its context embedder."""
    m = plan.model
    if isinstance(m, CausalLM):
        return m.census.largest_param
    if isinstance(m, FluxModel):
        return m.census.largest_param
    return max(6 * m.hidden * (m.hidden + 1), (m.joint_attention_dim + 1) * m.hidden)


def backward_units(plan: Plan, halves: bool = True) -> list[Unit]:
    """The backward's units in its order: the head, each block from the last, the embeddings.
    saved: each block's activations per token (_mmdit_block, _llama_layer) x tokens x micro
    batch; with activation checkpointing only its input (r x h per token), the rest recomputed
    in its backward. halves: a block not checkpointed as two units, its MLP (reached first)
    and the rest (attention, norms, modulation), each making its own weights' gradients as
    it frees its own saved tensors. Under autocast (sharding none: fp32 weights) each unit also
    saves the b-byte copies of its weights that its matrix multiplies use (a checkpointed block
    makes them in the forward too, kept in autocast's cache until the forward ends)."""
    w, m, dims = plan.workload, plan.model, plan.dims
    b, _, r = _dtypes(plan)
    checkpointing = plan.parallel.activation_checkpointing
    copies = b if dims.effective_sharding == "none" and b < FP32 else 0
    block, root = block_and_root(plan)
    head = _head_params(plan)
    if isinstance(m, CausalLM):
        per, tokens = _llama_layer(plan, m, w.seq_len), w.micro_batch * w.seq_len
        mlp = m.mlp_params  # gate, up, down (every expert's, and the router); the norm before them
        blocks = [(f"layer {i}", block, tokens, tokens * per["layer"], tokens * per["mlp"], mlp)
                  for i in range(m.layers, 0, -1)]  # fmt: skip
        head_saved, embed_saved = tokens * per["head"], 0.0  # the embedding keeps only the ids
    elif isinstance(m, FluxModel):
        blocks, head_saved, embed_saved = _flux_blocks(plan, m)
    else:
        image, text = w.micro_batch * w.image_tokens, w.micro_batch * m.text_tokens
        per = _mmdit_block(plan, m, w.image_tokens, m.text_tokens)
        h = m.hidden
        mlp = MLP_RATIO * h * h + MLP_RATIO * h + MLP_RATIO * h * h + h  # fc1, fc2 of one stream
        last = block - _text_side_difference(h)  # its text side has no MLP
        blocks = [(f"block {m.depth}", last, image + text, image * per["full"] + text * per["last_text"],
                   image * per["mlp"], mlp)]  # fmt: skip
        blocks += [(f"block {i}", block, image + text, (image + text) * per["full"],
                    (image + text) * per["mlp"], 2 * mlp) for i in range(m.depth - 1, 0, -1)]  # fmt: skip
        head_saved = image * per["head"]
        # the patch embedding's and the context embedder's inputs, in b
        embed_saved = b * (image * m.patch**2 * m.in_channels + text * m.joint_attention_dim)
    units = [Unit("head", head, head_saved + copies * head)]
    for name, params, tokens, full, mlp_saved, mlp_params in blocks:
        rest = params - mlp_params
        if checkpointing and halves:  # both halves recomputed first, then freed half by half
            units.append(Unit(f"{name}'s MLP", mlp_params, 0.0, full + copies * params, copies * params))
            units.append(Unit(f"{name}'s attention", rest, tokens * r * m.hidden,
                              full - mlp_saved + copies * rest))  # fmt: skip
        elif checkpointing:
            units.append(Unit(name, params, tokens * r * m.hidden, full + copies * params, copies * params))
        elif halves:
            units.append(Unit(f"{name}'s MLP", mlp_params, mlp_saved + copies * mlp_params))
            units.append(Unit(f"{name}'s attention", rest, full - mlp_saved + copies * rest))
        else:
            units.append(Unit(name, params, full + copies * params))
    units.append(Unit("embeddings", root - head, embed_saved + copies * (root - head)))
    return units


def model_buffers(plan: Plan, dtype_bytes: int) -> float:
    """Tensors a model holds beside its parameters: the MMDiT's position embedding table
    (pos_embed_max_size^2 x hidden, a buffer: in no parameter count), in the model's dtype;
    in the SD3 pipeline also each CLIP tower's position ids (77 int64). Llama's rotary table
    (head_dim / 2 floats) is left out."""
    m = plan.model
    t = m.transformer if isinstance(m, SD3Pipeline) else m
    if isinstance(t, CausalLM | FluxModel):
        return 0.0
    if isinstance(m, FluxPipeline):  # no position table: rotary; CLIP-L's position ids
        return float(CLIP_TOKENS * 8)
    ids = 2 * CLIP_TOKENS * 8 if isinstance(m, SD3Pipeline) else 0
    return float(dtype_bytes * t.pos_embed_max_size**2 * t.hidden + ids)


def training_batch(plan: Plan) -> tuple[float, float]:
    """(held, at the loss): the synthetic batch the program keeps for the run (made once), and
    the tensors of the loss. MMDiT: the latents, the text and pooled embeddings in fp32 and the
    first step's fixed noise; at the loss the step's noise, the noisy latents, the prediction
    in fp32, the target and the squared error, each latent-sized. Llama: the token ids (int64);
    its loss (logits, their fp32 copy, log-softmax) is the head's activations."""
    w, m = plan.workload, plan.model
    if isinstance(m, CausalLM):
        return 8.0 * w.micro_batch * w.seq_len, 0.0
    if isinstance(m, FluxModel):  # the packed latents; their 2 x 2 patches hold the same bytes
        latent = FP32 * w.micro_batch * m.in_channels * w.image_tokens
        text = FP32 * w.micro_batch * (m.text_tokens * m.joint_attention_dim + m.pooled_projection_dim)
        return 2 * latent + text, 5 * latent
    latent = FP32 * w.micro_batch * m.in_channels * w.latent_size**2
    text = FP32 * w.micro_batch * (m.text_tokens * m.joint_attention_dim + m.pooled_projection_dim)
    return 2 * latent + text, 5 * latent


def _gradient_flow(plan: Plan, unit: Unit) -> float:
    """The gradients of activations a unit's backward holds besides its parameters' (one
    unit's worth: the gradient arriving at its output and the one it passes on, r x h per
    token each, and its widest intermediate's, the MLP's, in b)."""
    w, m = plan.workload, plan.model
    b, _, r = _dtypes(plan)
    if unit.name in ("head", "embeddings"):
        return 0.0
    if isinstance(m, CausalLM):
        tokens, width = w.micro_batch * w.seq_len, m.mlp_width
    else:
        tokens, width = w.micro_batch * (w.image_tokens + m.text_tokens), MLP_RATIO * m.hidden
    return tokens * (2 * r * m.hidden + b * width)


def _step_temporaries(plan: Plan, updated: float) -> tuple[float, str]:
    """What the optimizer step allocates beside its state, for `updated` parameters: none for
    torch's fused Adam(W); its for-each implementation (CUDA, Gaudi) one fp32 tensor per
    parameter (the square root of the second moment); its per-tensor loop (the CPU's default)
    two of the largest parameter."""
    knobs = plan.tuning
    fused = knobs is not None and knobs.optimizer == "fused"
    if fused or plan.workload.optimizer.name not in OPTIMIZER_STATES:
        return 0.0, ""
    if plan.target.family == "cpu":
        return 2 * FP32 * largest_parameter(plan), "the step's temporaries: 2 x 4 B x the largest parameter"
    return FP32 * updated, "the for-each step's temporaries: 4 B per parameter"


Phase = tuple[str, list[Part]]  # a moment of the step, and what it holds then


def _left(plan: Plan, units: list[Unit], j: int, moment: str = "compute") -> float:
    """Activations held at unit j's `moment` in the backward: while it computes, the saved
    tensors of the units from it on, its recompute and the gradients of activations flowing
    through it; just before it (all-gather) or after it (reduce-scatter), the saved tensors of
    the units not done and one gradient flowing between units (half the flow)."""
    unit, flow = units[j], _gradient_flow(plan, units[j])
    if moment == "compute":
        return sum(u.saved for u in units[j:]) + unit.recompute + flow
    return sum(u.saved for u in units[j + (moment == "reduce-scatter") :]) + flow / 2


def _none_phases(plan: Plan, units: list[Unit], held: list[Part], loss: float) -> list[Phase]:
    """One device or DDP: fp32 weights 4P, optimizer state kP, and on CUDA and the CPU DDP's
    gradient buckets 4P (no gradient_as_bucket_view). The gradients (fp32, 4 B) exist only
    from the backward to the end of the step (zero_grad(set_to_none=True)), as the backward
    frees each unit's saved tensors: the forward's end holds every unit's saved tensors and
    none of them; during unit j's backward, the gradients of the units done (j's included)
    and the saved tensors of those not done. They are there before the backward where earlier
    micro batches made them (grad_accum > 1), or where they are views of DDP's buckets (the
    Gaudi adapter sets gradient_as_bucket_view)."""
    p, dims = plan.cost.params, plan.dims
    k, name = optimizer_states(plan) * FP32, plan.workload.optimizer.name
    view = dims.distributed and plan.target.family == "hpu"
    base = [
        Part("weights", FP32 * p, "fp32 parameters: 4 B x P"),
        Part("optimizer", k * p, f"{name}: {k} B x P of fp32 state"),
        *held,
    ]
    if dims.distributed and not view:
        base.append(Part("buckets", FP32 * p, "DDP's gradient buckets (no gradient_as_bucket_view): 4 B x P"))
    ready = view or plan.workload.grad_accum > 1
    grads = "DDP's buckets, which the gradients are views of: 4 B x P" if view else "fp32 gradients: 4 B x P"
    cached = sum(u.cached for u in units)
    forward = [
        *base,
        Part(
            "activations",
            sum(u.saved for u in units) + cached,
            "every unit's saved tensors" + (", autocast's weight copies" if cached else ""),
        ),
    ]
    if ready:
        forward.append(Part("gradients", FP32 * p, grads))
    forward.append(Part("loss", loss, "the loss's tensors"))
    phases = [("the forward's end", forward)]
    for j, unit in enumerate(units):
        left = _left(plan, units, j)
        if ready:  # the unit's new gradient, before it is added to the one there
            made, how = FP32 * (p + unit.params), f"{grads}, + {unit.name}'s new one"
        else:
            made, how = (
                FP32 * sum(u.params for u in units[: j + 1]),
                f"fp32 gradients of the units up to {unit.name}",
            )
        phases.append(
            (
                f"the backward of {unit.name}",
                [
                    *base,
                    Part("gradients", made, how),
                    Part(
                        "activations",
                        left,
                        f"the saved tensors of {unit.name} and those before it, "
                        "the gradients flowing through it",
                    ),
                    Part("loss", loss if j == 0 else 0.0, "the loss's tensors"),
                ],
            )
        )
    temporaries, how = _step_temporaries(plan, p)
    step = [*base, Part("gradients", FP32 * p, grads)]
    if temporaries:
        step.append(Part("working", temporaries, how))
    phases.append(("the optimizer step", step))
    return phases


def _fsdp_phases(plan: Plan, units: list[Unit], held: list[Part], loss: float) -> list[Phase]:
    """FSDP2 (fully_shard per block, then the root; parameters all-gathered in b, gradients
    reduce-scattered in fp32): fp32 shards 4P/N (the master weights), state kP/N, gradient
    shards 4P/N (the reduce-scatter's outputs, made in the backward). The root (embeddings,
    head; not resharded after the forward) stays gathered in b from the forward to the end of
    the backward, and its gradients in b gather there. Each block's backward holds its
    gathered parameters, the next block's (prefetched), its gradients in b, and the previous
    block's reduce-scatter input (4 B, kept until this block reduces); its all-gather briefly
    holds the gathered buffer beside the parameters' copy of it, and its reduce-scatter its
    fp32 input and output beside the gradients in b. On the CPU gloo's reduce-scatter works on
    a copy of its input, kept as long (x 2). Every micro batch reduce-scatters (both
    runtimes): with accumulation the fp32 shards of earlier micro batches, 4P/N, are held
    from the forward on, and the unsharded gradients never outlive their block."""
    p, n, b = plan.cost.params, plan.dims.data, BYTES[plan.workload.precision]
    k, name = optimizer_states(plan) * FP32, plan.workload.optimizer.name
    copies = 2 if plan.target.family == "cpu" else 1  # gloo's copy of the reduce-scatter input
    accumulated = plan.workload.grad_accum > 1  # shards of earlier micro batches
    root = units[0].params + units[-1].params
    base = [
        Part("weights", FP32 * p / n, "fp32 parameter shards (the master weights): 4 B x P / N"),
        Part("optimizer", k * p / n, f"{name}: {k} B x P / N"),
        *held,
        Part("root", b * root, f"the root (embeddings, head) gathered in {b} B"),
    ]
    forward = [
        *base,
        Part("activations", sum(u.saved for u in units), "every unit's saved tensors"),
        Part("loss", loss, "the loss's tensors"),
    ]
    if accumulated:
        shards = "fp32 gradient shards of earlier micro batches: 4 B x P / N"
        forward.append(Part("gradients", FP32 * p / n, shards))
    phases = [("the forward's end", forward)]

    def backward(j: int, working: float, how: str, moment: str = "compute") -> list[Part]:
        """What unit j's backward holds at `moment`: before it (all-gather: its saved tensors
        and the gradient arriving), while it computes (its recompute and gradients of
        activations too), or after it (reduce-scatter: the saved tensors of those before it
        and the gradient it passed on)."""
        unit = units[j]
        done = p if accumulated else sum(u.params for u in units[1:j])  # shards held
        head = units[0].params + (unit.params if unit is units[-1] else 0)
        left = _left(plan, units, j, moment)
        # the block's gradients in b: made while it computes, copied into the reduce-scatter's
        # input after
        in_b = moment in ("compute", "reduce-scatter")
        held = (
            "fp32 shards of every block (earlier micro batches)"
            if accumulated
            else "fp32 shards of the blocks reduced"
        )
        made = b * head + (b * unit.params if in_b and 0 < j < len(units) - 1 else 0)
        return [
            *base,
            Part(
                "gradients",
                FP32 * done / n + made,
                f"{held}, the gradients in {b} B so far",
            ),
            Part("working", working, how),
            Part("activations", left, f"the saved tensors left at {unit.name}'s {moment}"),
            Part("loss", loss if j == 0 else 0.0, "the loss's tensors"),
        ]

    phases.append(("the backward of the head", backward(0, 0.0, "")))
    previous = 0  # parameters of the block reduced last: its reduce-scatter input is kept
    for j in range(1, len(units) - 1):
        g = units[j].params
        following = units[j + 1].params if j + 1 < len(units) - 1 else 0  # prefetched
        kept = copies * FP32 * previous
        moments = {
            "all-gather": (
                2 * b * g + kept,
                f"{b} B x 2 x the block (gathered and copied out), the "
                f"previous reduce-scatter input x {copies}",
            ),
            "compute": (
                b * g + b * following + kept,
                f"the block in {b} B, the next block prefetched, the "
                f"previous reduce-scatter input x {copies}",
            ),
            "reduce-scatter": (
                b * following + (copies * FP32 + FP32 / n) * g,
                f"the reduce-scatter's fp32 input x {copies} and output, the next block prefetched",
            ),
        }
        for moment, (working, how) in moments.items():
            phases.append((f"the backward of {units[j].name}: {moment}", backward(j, working, how, moment)))
        previous = g
    last = len(units) - 1
    phases.append(
        (
            "the backward of the embeddings",
            backward(last, copies * FP32 * previous, "the previous reduce-scatter input"),
        )
    )
    reduce = backward(
        last,
        (copies * FP32 + FP32 / n) * root,
        f"the root's reduce-scatter (fp32 input x {copies} and output)",
        "reduce-scatter",
    )
    phases.append(("the root's reduce-scatter", [q for q in reduce if q.name != "root"]))
    temporaries, how = _step_temporaries(plan, p / n)
    step = [*base[:-1], Part("gradients", FP32 * p / n, "fp32 gradient shards: 4 B x P / N")]
    if temporaries:
        step.append(Part("working", temporaries, how))
    phases.append(("the optimizer step", step))
    return phases


def _zero_phases(plan: Plan, units: list[Unit], held: list[Part], loss: float) -> list[Phase]:
    """DeepSpeed ZeRO (the model cast to b; tests/test_memory_estimate.py measures each part):
    the 16-bit parameters bP (ZeRO-3: bP/N, and a b-byte gradient partition bP/N kept
    whole), the fp32 master partition and its state (4 + k)P/N, and the reduce bucket,
    b x 5e8 elements allocated whole whatever the model's size (from the first backward to the
    step; ZeRO-3 for the run). The gradients: ZeRO-1 keeps them in b (bP) until the step,
    which reduces them into an fp32 partition 4P/N; ZeRO-2 gathers them into the bucket and
    reduces each full bucket into an fp32 partition (4 B x its parameters, the one straddling
    the partition's end whole: + the largest parameter), kept to the step; ZeRO-3
    reduce-scatters each full bucket into its b-byte partition, and makes the fp32 partition
    at the step. A reduction flattens the bucket's gradients into one tensor, b x min(P, 5e8)
    (ZeRO-3 on the CPU: and gloo's copy of it); it comes at the backward's end where the whole
    model fits one bucket, else during any unit. ZeRO-3 gathers parameters as modules run: up
    to 1e9 (stage3_max_live_parameters) + 5e7 (its prefetch bucket) + one block, at most P."""
    p, n, b, stage = plan.cost.params, plan.dims.data, BYTES[plan.workload.precision], plan.dims.zero_stage
    k, name = optimizer_states(plan) * FP32, plan.workload.optimizer.name
    block, _ = block_and_root(plan)
    state = Part("optimizer", (FP32 + k) * p / n, f"fp32 master weights, {name} state: {FP32 + k} B x P / N")
    if stage == 3:
        gathered = b * min(p, ZERO3_LIVE + ZERO3_PREFETCH + block)
        base = [
            Part("weights", b * p / n, f"{b}-byte parameter partitions: {b} B x P / N"),
            state,
            Part("gradients", b * p / n, f"the {b}-byte gradient partition: {b} B x P / N"),
            Part("gathered", gathered, f"parameters gathered: {b} B x min(P, 1e9 + 5e7 + one block)"),
        ]
    else:
        base = [Part("weights", b * p, f"{b}-byte parameters: {b} B x P"), state]
    base += held
    with_bucket = [*base, Part("buckets", b * ZERO_REDUCE_BUCKET, f"DeepSpeed's reduce bucket: {b} B x 5e8")]
    one = b * min(p, ZERO_REDUCE_BUCKET)  # one bucket's gradients, flattened
    flat = one * (2 if stage == 3 and plan.target.family == "cpu" else 1)
    gloo = ", and gloo's copy of them" if flat > one else ""
    grads = {
        1: Part("gradients", b * p, f"{b}-byte gradients: {b} B x P"),
        2: Part("gradients", FP32 * (p / n + largest_parameter(plan)),
                "the fp32 gradient partition: 4 B x (P / N + the largest parameter)"),
    }.get(stage)  # fmt: skip
    ready = plan.workload.grad_accum > 1  # the gradients of earlier micro batches
    anywhere = p > ZERO_REDUCE_BUCKET  # a full bucket can be reduced during any unit's backward
    forward = [
        *with_bucket,
        Part("activations", sum(u.saved for u in units), "every unit's saved tensors"),
        Part("loss", loss, "the loss's tensors"),
    ]
    if ready and grads:
        forward.append(grads)
    phases = [("the forward's end", forward)]
    for j, unit in enumerate(units):
        parts = [
            *with_bucket,
            Part("activations", _left(plan, units, j), f"the saved tensors from {unit.name} on"),
            Part("loss", loss if j == 0 else 0.0, "the loss's tensors"),
        ]
        if stage == 1:
            made = b * p if ready else b * sum(u.params for u in units[: j + 1])
            parts.append(Part("gradients", made, f"{b}-byte gradients made so far"))
        elif grads and (ready or anywhere):
            parts.append(grads)
        if anywhere:
            parts.append(Part("working", flat, f"a bucket's gradients flattened for its reduction{gloo}"))
        phases.append((f"the backward of {unit.name}", parts))
    reduce = [
        *with_bucket,
        Part(
            "working", flat, f"the bucket's gradients flattened for the reduction: {b} B x min(P, 5e8){gloo}"
        ),
        Part("activations", units[-1].saved, "the embeddings' saved tensors"),
    ]
    if grads:
        reduce.append(grads)
    phases.append(("the reduction at the backward's end", reduce))
    partition = Part("working", FP32 * p / n, "the step's fp32 gradient partition: 4 B x P / N")
    if stage == 1:
        step = [*base, grads, partition]
    elif stage == 2:
        step = [*base, grads]
    else:
        step = [*with_bucket, partition]
    phases.append(("the optimizer step", step))
    return phases


def training_phases(plan: Plan) -> list[Phase]:
    """Every moment of a training step that could be its peak, each with what it holds."""
    sharding = plan.dims.effective_sharding
    units = backward_units(plan, halves=sharding != "fsdp")  # FSDP2 gathers and reduces whole blocks
    b = BYTES[plan.workload.precision]
    batch, loss = training_batch(plan)
    model_bytes = b if plan.dims.deepspeed else FP32  # DeepSpeed casts the model, buffers too
    held = [Part("batch", batch, "the synthetic batch, kept for the run")]
    buffers = model_buffers(plan, model_bytes)
    if buffers:
        held.append(
            Part("buffers", buffers, f"the position embedding table: {model_bytes} B x max_size^2 x h")
        )
    if sharding == "none":
        return _none_phases(plan, units, held, loss)
    if sharding == "fsdp":
        return _fsdp_phases(plan, units, held, loss)
    return _zero_phases(plan, units, held, loss)


def peak_phase(phases: list[Phase]) -> Phase:
    """The phase that holds the most (the first of equals)."""
    return max(phases, key=lambda phase: sum(q.bytes for q in phase[1]))


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
    hpu_llama = isinstance(plan.model, CausalLM) and plan.target.family == "hpu"
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
    mlp = 2 * n * h + 10 * b * h  # its LayerNorm, modulated input, fc1, GELU and fc2 outputs
    return {"full": full, "last_text": 2 * n * h + 4 * b * h + joint, "head": (2 * n + b) * h, "mlp": mlp}


def _flux_per_token(plan: Plan, m: FluxModel) -> tuple[dict, dict]:
    """Bytes per token of a double-stream and of a single-stream block (plan/memory_flux.py)."""
    b, n, r = _dtypes(plan)
    s = plan.workload.image_tokens + m.text_tokens
    eager = eager_attention(plan)
    shape = (b, n, r, m.hidden, m.heads, s, eager)
    return double_block(*shape), single_block(*shape)


def _flux_head(plan: Plan, m: FluxModel) -> float:
    """Per image token, the final AdaLayerNormContinuous (input, output) and projection input."""
    b, n, _ = _dtypes(plan)
    return (2 * n + b) * m.hidden


def _flux_blocks(plan: Plan, m: FluxModel) -> tuple[list, float, float]:
    """backward_units' blocks of a Flux transformer, the last single-stream block first, and
    the head's and the embedders' saved bytes."""
    w = plan.workload
    b, _, _ = _dtypes(plan)
    double, single = _flux_per_token(plan, m)
    census, h = m.census, m.hidden
    tokens = w.micro_batch * (w.image_tokens + m.text_tokens)
    mlp_single = h * MLP_RATIO * h + MLP_RATIO * h  # the MLP projection (its out is shared)
    mlp_double = 2 * (2 * MLP_RATIO * h * h + MLP_RATIO * h + h)  # fc1 and fc2 of both streams
    blocks = [(f"single block {i}", census.single_block, tokens, tokens * single["full"],
               tokens * single["mlp"], mlp_single) for i in range(m.single_depth, 0, -1)]  # fmt: skip
    blocks += [(f"block {i}", census.double_block, tokens, tokens * double["full"],
                tokens * double["mlp"], mlp_double) for i in range(m.depth, 0, -1)]  # fmt: skip
    image, text = w.micro_batch * w.image_tokens, w.micro_batch * m.text_tokens
    head_saved = image * _flux_head(plan, m)
    embed_saved = b * (image * m.in_channels + text * m.joint_attention_dim)
    return blocks, head_saved, embed_saved


def _llama_layer(plan: Plan, m: CausalLM, tokens: int) -> dict[str, float]:
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
    mlp = (FP32 + r + b) * h + 4 * b * m.mlp_width  # its RMSNorm, gate, SiLU, up, product
    layer = 2 * (FP32 + r + b) * h + b * (3 * q + 2 * kv) + 4 * b * m.mlp_width + attend
    return {"layer": layer, "head": (FP32 + r + b) * h + (b + 8) * m.vocab, "mlp": mlp}


def training_activations(plan: Plan, checkpointing: bool) -> float:
    """Activations per device at the start of the backward, for one micro batch."""
    w, m = plan.workload, plan.model
    _, _, r = _dtypes(plan)
    if isinstance(m, CausalLM):
        per = _llama_layer(plan, m, w.seq_len)
        kept = m.layers * (r * m.hidden if checkpointing else per["layer"])
        per_sample = w.seq_len * (kept + (per["layer"] if checkpointing else 0) + per["head"])
    elif isinstance(m, FluxModel):
        double, single = _flux_per_token(plan, m)
        tokens = w.image_tokens + m.text_tokens
        blocks = tokens * (m.depth * double["full"] + m.single_depth * single["full"])
        if checkpointing:  # each block keeps its inputs; one is recomputed at a time
            blocks = (m.depth + m.single_depth) * tokens * r * m.hidden + tokens * double["full"]
        per_sample = blocks + w.image_tokens * _flux_head(plan, m)
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
    if not isinstance(m, CausalLM):
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


def pipeline_text_tokens(m: SD3Pipeline) -> int:
    """The text context the pipeline makes for the MMDiT: CLIP's 77 tokens (CLIP-L and CLIP-G
    side by side) then T5's t5_tokens (zeros in T5's place without it), not the standalone
    MMDiT's text_tokens."""
    return CLIP_TOKENS + m.t5_tokens


def inference_working(plan: Plan) -> tuple[float, str]:
    """The largest transient tensors of an inference call (no activations are kept)."""
    m, w = plan.model, plan.workload
    b, t = BYTES[w.precision], plan.dims.tensor
    if isinstance(m, CausalLM):
        tokens = w.batch * w.input_tokens
        working = tokens * ((2 * FP32 + 3 * b) * m.hidden + 3 * m.mlp_width / t * b)
        if eager_attention(plan):
            working += w.batch * m.heads / t * w.input_tokens**2 * (FP32 + b)
        scores = ", + one layer's scores" if eager_attention(plan) else ""
        how = (
            "prefill: batch x input x ((8 + 3b)h + 3i/t x b): an RMSNorm's fp32 input and output, "
            f"the embedding and two residual sums, the MLP's gate, up and product{scores}"
        )
        return working, how
    tr = m.transformer
    passes = 2 if w.classifier_free_guidance else 1
    tokens = w.image_tokens + (tr.text_tokens if isinstance(m, FluxPipeline) else pipeline_text_tokens(m))
    mmdit = passes * w.batch * tokens * (4 + 2 * MLP_RATIO) * tr.hidden * b
    if isinstance(m, FluxPipeline):  # a single-stream block's widest: the 5h concatenation and more
        flux = w.batch * tokens * (4 + 2 * MLP_RATIO + 1 + MLP_RATIO) * tr.hidden * b
        vae = (FLUX_SMOKE if plan.smoke else FLUX_FULL)["vae"]
        decode = _vae_decode(vae, w.resolution, w.batch, b)
        if decode > flux:
            return decode, "VAE decode: 3 tensors of its widest stage (batch x channels x pixels x b)"
        return flux, "a Flux single-stream pass: 17h per token x batch x (image + text) tokens x b"
    decode = _vae_decode((SMOKE if plan.smoke else FULL)["vae"], w.resolution, w.batch, b)
    if decode > mmdit:
        return decode, "VAE decode: 3 tensors of its widest stage (batch x channels x pixels x b)"
    return mmdit, "an MMDiT pass: 12h per token x (CFG) batch x (image + 77 + t5) tokens x b"


def _vae_decode(vae: dict, side: int, batch: int, b: int) -> float:
    """VAE decode's widest moment: 3 tensors of its widest stage."""
    stages = [c * (side // 2**i) ** 2 for i, c in enumerate(vae["block_out_channels"])]
    stages.append(vae["block_out_channels"][1] * side * side)  # the last upsampler's output
    return 3 * batch * max(stages) * b


def pipeline_held(plan: Plan) -> float:
    """What an SD3 pipeline call holds from its start to the image (in b): the prompt
    embeddings (the conditional ones and, with guidance, the unconditional and conditional
    side by side: 3 x (77 + t5) x joint width) and the pooled ones (3 x pooled width), and
    seven latent-sized tensors (the doubled model input 2, the prediction 2, the guided
    prediction, the scheduler's step and the VAE's scaled input), per image; and the
    scheduler's timesteps and sigmas (fp32)."""
    m, w = plan.model, plan.workload
    tr, b = m.transformer, BYTES[w.precision]
    if isinstance(m, FluxPipeline):  # the prompt's T5 and pooled embeddings; latents as SD3's
        text = tr.text_tokens * tr.joint_attention_dim + tr.pooled_projection_dim
        latents = 4 * tr.in_channels * w.image_tokens
        return float(b * w.batch * (text + latents) + FP32 * (2 * w.denoising_steps + 1))
    copies = 3 if w.classifier_free_guidance else 1
    text = copies * (pipeline_text_tokens(m) * tr.joint_attention_dim + tr.pooled_projection_dim)
    latents = (7 if w.classifier_free_guidance else 4) * tr.in_channels * w.latent_size**2
    schedule = FP32 * (2 * w.denoising_steps + 1)  # the scheduler's timesteps and sigmas
    return float(b * w.batch * (text + latents) + schedule)


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
        buffers = model_buffers(plan, b)
        if buffers:
            parts.append(
                Part(
                    "buffers",
                    buffers,
                    "CLIP-L's position ids (77 x 8 B)"
                    if isinstance(plan.model, FluxPipeline)
                    else f"the position embedding table: {b} B x max_size^2 x h"
                    + (", CLIP's position ids" if isinstance(plan.model, SD3Pipeline) else ""),
                )
            )
        if isinstance(plan.model, SD3Pipeline | FluxPipeline):
            parts.append(Part("batch", pipeline_held(plan), "the prompt embeddings and latents of the call"))
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
    phase, parts = peak_phase(training_phases(plan))
    held = tuple(q for q in parts if q.bytes)
    return Memory(
        held, activations_off=off, activations_on=on, build=whole_build(plan), phase=phase, **capacity
    )
