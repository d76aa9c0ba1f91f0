"""The backward's units, and what a training step holds beside its weights. No torch.

One job: the backward in its order, unit by unit (the head, each block or its halves, the
embeddings), each with the parameters whose gradients it makes and the tensors it frees; and
what the phases add around them: the optimizer's state per parameter, the model's buffers, the
synthetic batch and the loss, the gradients flowing through a unit, the optimizer step's
temporaries and the activations left at each moment of a unit.
"""

from __future__ import annotations

from ...catalog.sd3_components import CLIP_TOKENS
from ...records import frozen
from ..flops import MLP_RATIO
from ..types import CausalLM, FluxModel, FluxPipeline, Plan, SD3Pipeline
from .activations import _dtypes, _flux_blocks, _llama_layer, _mmdit_block
from .parameters import _text_side_difference, block_and_root
from .parts import FP32, OPTIMIZER_STATES


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


def _left(plan: Plan, units: list[Unit], j: int, moment: str = "compute") -> float:
    """Activations held at unit j's `moment` in the backward: while it computes, the saved
    tensors of the units from it on, its recompute and the gradients of activations flowing
    through it; just before it (all-gather) or after it (reduce-scatter), the saved tensors of
    the units not done and one gradient flowing between units (half the flow)."""
    unit, flow = units[j], _gradient_flow(plan, units[j])
    if moment == "compute":
        return sum(u.saved for u in units[j:]) + unit.recompute + flow
    return sum(u.saved for u in units[j + (moment == "reduce-scatter") :]) + flow / 2
