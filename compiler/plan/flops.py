"""Model size and model FLOPs per sample, from the architecture alone (no torch).

MFU = achieved model FLOP/s / (world size x the target's peak). "Model FLOPs" count the
matrix multiplications the model needs (2 FLOPs per multiply-add) and the attention score and
value products; a training step costs 3x the forward pass (forward + backward = 2x forward).
Recomputation (activation checkpointing) is not counted: MFU, not hardware FLOPs utilisation.

MMDiT (diffusers' SD3Transformer2DModel), hidden h, L joint blocks, the last one
"context pre-only" (it updates image tokens only), S_i image tokens, S_t text tokens:
- per image token per block: q, k, v, out projections 4h^2 + MLP 8h^2 = 12h^2 multiply-adds
- per text token per block: q, k, v 3h^2, plus out 1h^2 and MLP 8h^2 except in the last block
- per block: attention over S = S_i + S_t tokens: 2 S^2 h (scores) + 2 S^2 h (values)
- per sample: the AdaLN modulation linears, timestep and pooled-text embedders
- per token: patch embedding, context embedder, output projection
The parameter count is exact for diffusers' model (tested against it); FLOPs are tested
against torch's FLOP counter on a small model.

Llama (transformers' LlamaForCausalLM): the q and o projections are hidden x heads * head_dim,
k and v hidden x kv_heads * head_dim; head_dim defaults to hidden / heads (q and o square). A
spec may set another head_dim (one tensor-parallel rank of a larger model: 8 of Llama-2-70B's
64 heads over the full hidden size); parameters are tested against transformers for both.
"""

from __future__ import annotations

from ..records import frozen

TIMESTEP_CHANNELS = 256  # diffusers' Timesteps(num_channels=256) in the SD3 time embedding
MLP_RATIO = 4


@frozen
class ModelCost:
    params: int
    forward_flops_per_sample: float
    train_flops_per_sample: float | None  # forward + backward; None for inference


def mmdit_params(
    depth: int,
    hidden: int,
    patch: int,
    in_channels: int,
    joint_attention_dim: int,
    pooled_projection_dim: int,
    head_dim: int,
    qk_norm: str,
    out_channels: int | None = None,
) -> int:
    h = hidden
    out_channels = out_channels or in_channels
    linear = lambda n_in, n_out: n_in * n_out + n_out  # noqa: E731 - weights + bias
    block = 4 * linear(h, h) + linear(h, 6 * h)  # image q k v out; AdaLN-Zero modulation
    block += linear(h, MLP_RATIO * h) + linear(MLP_RATIO * h, h)  # image MLP
    block += 3 * linear(h, h)  # text q k v
    full_text = linear(h, h) + linear(h, MLP_RATIO * h) + linear(MLP_RATIO * h, h) + linear(h, 6 * h)
    last_text = linear(h, 2 * h)  # the last block's text side: AdaLayerNormContinuous only
    norms = 4 * head_dim if qk_norm == "rms_norm" else 0  # q, k, added q, added k RMSNorm weights
    blocks = depth * (block + norms) + (depth - 1) * full_text + last_text
    embed = in_channels * patch * patch * h + h  # patch embedding (a conv)
    embed += linear(joint_attention_dim, h)  # context embedder
    embed += linear(TIMESTEP_CHANNELS, h) + linear(h, h)  # timestep embedder
    embed += linear(pooled_projection_dim, h) + linear(h, h)  # pooled text embedder
    head = linear(h, 2 * h) + linear(h, patch * patch * out_channels)  # final AdaLN + projection
    return blocks + embed + head


def mmdit_cost(
    depth: int,
    hidden: int,
    patch: int,
    in_channels: int,
    joint_attention_dim: int,
    pooled_projection_dim: int,
    head_dim: int,
    qk_norm: str,
    image_tokens: int,
    text_tokens: int,
) -> ModelCost:
    h, s_i, s_t = hidden, image_tokens, text_tokens
    mlp = 2 * MLP_RATIO * h * h
    macs = depth * s_i * (4 * h * h + mlp)  # image tokens through every block
    macs += depth * s_t * 3 * h * h + (depth - 1) * s_t * (h * h + mlp)  # text tokens
    macs += depth * 2 * (s_i + s_t) ** 2 * h  # joint attention: scores and weighted values
    macs += depth * (6 * h * h) + (depth - 1) * 6 * h * h + 2 * h * h  # AdaLN modulation
    macs += TIMESTEP_CHANNELS * h + h * h + pooled_projection_dim * h + h * h + 2 * h * h
    macs += s_i * in_channels * patch * patch * h + s_t * joint_attention_dim * h
    macs += s_i * h * patch * patch * in_channels
    forward = 2.0 * macs
    params = mmdit_params(
        depth, hidden, patch, in_channels, joint_attention_dim, pooled_projection_dim, head_dim, qk_norm
    )
    return ModelCost(params, forward, 3.0 * forward)


def _llama_widths(hidden: int, heads: int, kv_heads: int, head_dim: int | None) -> tuple[int, int]:
    """(q, kv): the widths of the query (and attention output) and of the key and value
    projections. head_dim None: hidden / heads, so q is as wide as the hidden size."""
    if head_dim is None:
        return hidden, kv_heads * (hidden // heads)
    return heads * head_dim, kv_heads * head_dim


def llama_params(hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int, vocab: int, *,
                 head_dim: int | None = None) -> int:  # fmt: skip
    """transformers' LlamaForCausalLM (no biases, untied input and output embeddings). q and o
    are hidden x heads * head_dim, k and v hidden x kv_heads * head_dim (head_dim None:
    hidden / heads)."""
    q, kv = _llama_widths(hidden, heads, kv_heads, head_dim)
    attention = 2 * hidden * q + 2 * hidden * kv  # q, o; k, v
    mlp = 3 * hidden * intermediate  # gate, up, down
    norms = 2 * hidden
    return layers * (attention + mlp + norms) + hidden + 2 * vocab * hidden  # final norm, embed, head


def _llama_matmul_weights(hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int,
                          vocab: int, *, head_dim: int | None = None) -> int:  # fmt: skip
    """Weights every token multiplies through: attention and MLP projections of each layer,
    and the output head (the input embedding is a lookup, not a matmul)."""
    q, kv = _llama_widths(hidden, heads, kv_heads, head_dim)
    per_layer = 2 * hidden * q + 2 * hidden * kv + 3 * hidden * intermediate
    return layers * per_layer + vocab * hidden


def llama_cost(hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int, vocab: int,
               seq_len: int, *, head_dim: int | None = None) -> ModelCost:  # fmt: skip
    """FLOPs per *sequence* of seq_len tokens: 2 x matmul weights x tokens, plus attention
    scores and values over the full seq_len x seq_len, each heads x head_dim wide (the
    convention of the PaLM paper's 6N + 12 L h T per token; causal masking is not discounted)."""
    shape = (hidden, layers, heads, kv_heads, intermediate, vocab)
    q, _ = _llama_widths(hidden, heads, kv_heads, head_dim)
    matmul = _llama_matmul_weights(*shape, head_dim=head_dim)
    forward = 2.0 * matmul * seq_len + layers * 4.0 * seq_len * seq_len * q
    return ModelCost(llama_params(*shape, head_dim=head_dim), forward, 3.0 * forward)


def llama_generate_flops(hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int,
                         vocab: int, input_tokens: int, output_tokens: int, *,
                         head_dim: int | None = None) -> float:  # fmt: skip
    """Forward FLOPs to prefill `input_tokens` and generate `output_tokens` with a KV cache:
    every token fed costs 2 x the layers' matmul weights and attends to all tokens before it
    (4 L x heads x head_dim x context); the output head runs once per generated token
    (generate keeps only the prompt's last logits). Work a static cache pads in (attention
    over its unfilled positions) is not model work and not counted."""
    q, _ = _llama_widths(hidden, heads, kv_heads, head_dim)
    matmul = _llama_matmul_weights(hidden, layers, heads, kv_heads, intermediate, vocab, head_dim=head_dim)
    head = vocab * hidden
    tokens = input_tokens + output_tokens - 1  # the last generated token is not fed back
    # the prefill attends input x input; decode step t (1 .. output - 1) attends input + t:
    # an arithmetic series, summed in closed form
    steps = output_tokens - 1
    context = input_tokens * input_tokens + steps * input_tokens + steps * (steps + 1) // 2
    return 2.0 * (matmul - head) * tokens + 2.0 * head * output_tokens + 4.0 * layers * q * context
