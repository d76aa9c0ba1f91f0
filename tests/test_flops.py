"""Model size and FLOPs (plan/flops.py) against diffusers' real SD3Transformer2DModel."""

from __future__ import annotations

import pytest
import torch
from diffusers import SD3Transformer2DModel
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from benchc.plan.flops import mmdit_cost, mmdit_params

CONFIGS = [  # depth, head_dim, qk_norm, joint_attention_dim, pooled_projection_dim
    (24, 64, None, 4096, 2048),  # SD3 medium (d24): 2,028,328,000 parameters
    (38, 64, "rms_norm", 4096, 2048),  # SD3 large (d38)
    (2, 32, None, 64, 64),  # the smoke model
    (3, 16, "rms_norm", 48, 40),
]


def _kwargs(depth, head_dim, qk_norm, joint, pooled, latent=16):
    return dict(
        sample_size=latent, patch_size=2, in_channels=16, out_channels=16, num_layers=depth,
        attention_head_dim=head_dim, num_attention_heads=depth, joint_attention_dim=joint,
        caption_projection_dim=depth * head_dim, pooled_projection_dim=pooled,
        pos_embed_max_size=max(latent // 2, 16), qk_norm=qk_norm,
    )  # fmt: skip


@pytest.mark.parametrize("config", CONFIGS)
def test_parameter_count_is_exact(config):
    depth, head_dim, qk_norm, joint, pooled = config
    with torch.device("meta"):
        model = SD3Transformer2DModel(**_kwargs(*config))
    counted = sum(p.numel() for p in model.parameters())
    assert mmdit_params(depth, depth * head_dim, 2, 16, joint, pooled, head_dim, qk_norm or "none") == counted
    if depth == 24:
        assert counted == 2_028_328_000


@pytest.mark.parametrize("config", CONFIGS[2:])
@pytest.mark.parametrize("latent, text_tokens", [(16, 16), (8, 10)])
def test_forward_flops_match_torch_flop_counter(config, latent, text_tokens):
    depth, head_dim, qk_norm, joint, pooled = config
    model = SD3Transformer2DModel(**_kwargs(*config, latent=latent))
    inputs = dict(
        hidden_states=torch.randn(1, 16, latent, latent),
        encoder_hidden_states=torch.randn(1, text_tokens, joint),
        pooled_projections=torch.randn(1, pooled),
        timestep=torch.rand(1),
    )
    # the math backend decomposes attention into matmuls the counter sees
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        model(**inputs)
    cost = mmdit_cost(depth, depth * head_dim, 2, 16, joint, pooled, head_dim, qk_norm or "none",
                      (latent // 2) ** 2, text_tokens)  # fmt: skip
    assert cost.forward_flops_per_sample == counter.get_total_flops()
    assert cost.train_flops_per_sample == 3 * cost.forward_flops_per_sample


def test_llama_parameters_and_flops_match_transformers():
    from transformers import LlamaConfig, LlamaForCausalLM

    from benchc.plan.flops import llama_cost, llama_params

    for hidden, layers, heads, kv, inter, vocab in [
        (8192, 80, 64, 8, 28672, 32000),
        (128, 2, 4, 2, 256, 1024),
    ]:
        config = LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                             num_key_value_heads=kv, intermediate_size=inter, vocab_size=vocab)  # fmt: skip
        with torch.device("meta"):
            counted = sum(p.numel() for p in LlamaForCausalLM(config).parameters())
        assert llama_params(hidden, layers, heads, kv, inter, vocab) == counted
    assert counted == 557_696
    model = LlamaForCausalLM(config)
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(0, vocab, (1, 64)))
    cost = llama_cost(hidden, layers, heads, kv, inter, vocab, 64)
    # the counter also sees the rotary embedding's small outer product (head_dim / 2 x seq_len)
    assert cost.forward_flops_per_sample == pytest.approx(counter.get_total_flops(), rel=1e-4)
