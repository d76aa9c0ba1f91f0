"""Parameters of a plan's model, per part and per block. No torch.

One job: the parameter counts the estimate multiplies by bytes: the SD3 and Flux pipelines'
other components (CLIP, T5, the VAE) beside the transformer, one repeated block and the root
(embeddings, final norm, head), and the parameters one device holds for inference under tensor
parallelism.
"""

from __future__ import annotations

from ...catalog.flux import FULL_PARTS as FLUX_FULL
from ...catalog.flux import SMOKE_PARTS as FLUX_SMOKE
from ...catalog.sd3_components import FULL, SMOKE
from ..flops import MLP_RATIO, mmdit_params
from ..types import CausalLM, FluxModel, FluxPipeline, Plan, SD3Pipeline


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
