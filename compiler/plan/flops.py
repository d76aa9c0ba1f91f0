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

Flux (diffusers' FluxTransformer2DModel, plan/census_flux.py): counted from the model built on
the meta device: each weight matrix by the rows it multiplies (image tokens, text tokens, both
in the single-stream blocks, or one per sample), and every block's attention over image + text
tokens. Tested against torch's FLOP counter (tests/test_flux.py).

Causal LMs (any transformers family, plan/census.py): counted from the model built on the
meta device, not from a formula per family: the weight matrices a token multiplies through
(in a mixture of experts, the router and experts_per_token of each layer's experts), the
output head, each layer's query width and sliding window. Tested against transformers'
parameter counts and torch's FLOP counter per family (tests/test_causal_lm.py).
"""

from __future__ import annotations

from ..records import frozen
from .census import Census, FluxCensus

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


def _keys_per_query(length: int, window: int | None) -> int:
    """Keys a query attends to in a sequence of `length` (no causal discount, as the PaLM
    convention): all of them, or at most the sliding window."""
    return length if window is None else min(length, window)


def causal_lm_cost(census: Census, seq_len: int) -> ModelCost:
    """FLOPs per *sequence* of seq_len tokens: 2 x the layer matmul weights a token multiplies
    through (the active experts and the router in a mixture of experts) plus the output head,
    x tokens; attention scores and values per layer, each q_width wide, over seq_len queries
    x the keys each attends to (the whole sequence: the PaLM convention of 6N + 12 L h T per
    token, causal masking not discounted; at most the window for a sliding-window layer)."""
    matmul = census.active_matmul + census.head
    attention = sum(4.0 * census.q_width * seq_len * _keys_per_query(seq_len, w) for w in census.windows)
    forward = 2.0 * matmul * seq_len + attention
    return ModelCost(census.params, forward, 3.0 * forward)


def _context_keys(input_tokens: int, steps: int, window: int | None) -> int:
    """Keys attended to over a prefill of input_tokens queries (each over the prompt, or its
    window) and `steps` decode steps (step t over input + t keys, at most the window)."""
    prefill = input_tokens * _keys_per_query(input_tokens, window)
    if window is None or input_tokens + steps <= window:  # an arithmetic series, in closed form
        return prefill + steps * input_tokens + steps * (steps + 1) // 2
    growing = max(0, min(steps, window - input_tokens))  # steps before the window is full
    return prefill + growing * input_tokens + growing * (growing + 1) // 2 + (steps - growing) * window


def causal_lm_generate_flops(census: Census, input_tokens: int, output_tokens: int) -> float:
    """Forward FLOPs to prefill `input_tokens` and generate `output_tokens` with a KV cache:
    every token fed costs 2 x the layers' active matmul weights and attends to the tokens
    before it (4 x q_width per key, at most the window's keys); the output head runs once per
    generated token (generate keeps only the prompt's last logits). Work a static cache pads
    in (attention over its unfilled positions) is not model work and not counted."""
    tokens = input_tokens + output_tokens - 1  # the last generated token is not fed back
    steps = output_tokens - 1
    attention = sum(4.0 * census.q_width * _context_keys(input_tokens, steps, w) for w in census.windows)
    return 2.0 * census.active_matmul * tokens + 2.0 * census.head * output_tokens + attention


def flux_cost(census: FluxCensus, image_tokens: int, text_tokens: int, training: bool) -> ModelCost:
    """FLOPs per *image* of a Flux transformer (FluxCensus.forward_flops); training 3x."""
    forward = census.forward_flops(image_tokens, text_tokens)
    return ModelCost(census.params, forward, 3.0 * forward if training else None)
