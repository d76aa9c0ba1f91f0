"""The bytes a training forward saves for the backward. No torch.

One job: the per-token formulas of each kind of layer (an MMDiT joint block, a Llama decoder
layer, Flux's blocks through flux.py), the dtypes they are saved in, and the activations of one
micro batch at the start of the backward, with and without activation checkpointing.
"""

from __future__ import annotations

from ..flops import MLP_RATIO
from ..types import CausalLM, FluxModel, MMDiTModel, Plan
from .flux import double_block, single_block
from .parts import BYTES, FP32


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
    """Bytes per token of a double-stream and of a single-stream block (memory/flux.py)."""
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
