"""What an inference call holds beside its weights. No torch.

One job: the static KV cache of a causal LM, the largest transient tensors of a call (prefill,
an MMDiT or Flux pass, the VAE's decode), and what an SD3 or Flux pipeline call holds from its
start to the image (prompt embeddings, latents, the scheduler's steps).
"""

from __future__ import annotations

from ...catalog.flux import FULL_PARTS as FLUX_FULL
from ...catalog.flux import SMOKE_PARTS as FLUX_SMOKE
from ...catalog.sd3_components import CLIP_TOKENS, FULL, SMOKE
from ..flops import MLP_RATIO
from ..types import CausalLM, FluxPipeline, Plan, SD3Pipeline
from .activations import eager_attention
from .parts import BYTES, FP32


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
