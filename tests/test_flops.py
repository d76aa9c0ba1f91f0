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
    from census_helpers import llama_cost, llama_params
    from transformers import LlamaConfig, LlamaForCausalLM

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


@pytest.mark.integration
@pytest.mark.parametrize("input_tokens, output_tokens, cache", [(16, 8, "dynamic"), (32, 1, "dynamic"),
                                                                 (16, 8, "static")])  # fmt: skip
def test_generation_flops_match_torch_flop_counter(input_tokens, output_tokens, cache):
    """Prefill and decode as transformers' generate runs them (the output head on the prompt's
    last token only, each decode step attending the tokens so far). A static cache also
    attends its unfilled, masked positions: more than model work, never less."""
    from census_helpers import llama_generate_flops
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = (128, 2, 4, 2, 256, 1024)  # hidden, layers, heads, kv heads, intermediate, vocab
    hidden, layers, heads, kv, inter, vocab = shape
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv, intermediate_size=inter, vocab_size=vocab,
                         attn_implementation="sdpa")  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, vocab, (1, input_tokens))
    options = {"cache_implementation": "static"} if cache == "static" else {}
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=output_tokens,
                       min_new_tokens=output_tokens, do_sample=False, pad_token_id=0, **options)  # fmt: skip
    counted, modelled = counter.get_total_flops(), llama_generate_flops(*shape, input_tokens, output_tokens)
    if cache == "dynamic":  # the counter also sees RoPE's small outer products
        assert counted == pytest.approx(modelled, rel=1e-4)
    else:
        assert modelled < counted < 1.05 * modelled


SD3_PROBE = """
import json, sys, time
import torch
from torch.utils.flop_counter import FlopCounterMode
sys.path.insert(0, sys.argv[1])
import bench

counted = []  # FLOPs of each MMDiT forward
build = bench.build_pipeline

def hooked(*args, **kwargs):
    pipe = build(*args, **kwargs)
    counter = []
    def start(module, args, kwargs):
        counter.append(FlopCounterMode(display=False))
        counter[-1].__enter__()
    def stop(module, args, kwargs, output):
        mode = counter.pop()
        mode.__exit__(None, None, None)
        counted.append(mode.get_total_flops())
    pipe.transformer.register_forward_pre_hook(start, with_kwargs=True)
    pipe.transformer.register_forward_hook(stop, with_kwargs=True)
    return pipe

bench.build_pipeline = hooked
bench.pipeline_benchmark({}, time.perf_counter())
print(json.dumps({"forwards": counted, "plan": bench.PLAN}))
"""


@pytest.mark.integration
def test_sd3_pipeline_flops_per_image_match_torch_flop_counter(tmp_path):
    """The denoising loop of the real (tiny) SD3 pipeline of the generated program: FLOPs per
    image = the MMDiT's forward (a doubled batch under guidance) x denoising steps, as the
    plan counts it (text encoders and VAE not counted)."""
    import json
    import os

    from warm_launch import warm_run

    from helpers import REPO, point_in, run_cli

    sets = ["--set", "infer.attention=eager", "--set", "infer.steps=2", "--set", "infer.warmup=1"]
    assert (
        run_cli("compile", "specs/sd3-infer.bench", "--smoke", *sets, "-o", str(tmp_path), cwd=REPO).code == 0
    )
    point = point_in(tmp_path / "sd3_large_infer/cpu")
    script = tmp_path / "probe.py"
    script.write_text(SD3_PROBE)
    proc = warm_run(script, [point], {**os.environ, "OMP_NUM_THREADS": "1"}, point, [point / "bench.py"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    run, forwards = found["plan"]["infer"], found["forwards"]
    assert run["guidance"] > 1 and len(set(forwards)) == 1  # every step the same doubled batch
    assert len(forwards) == run["steps"] * run["denoising_steps"]
    per_image = forwards[0] * run["denoising_steps"] / run["batch"]
    assert found["plan"]["flops_per_sample"] == pytest.approx(per_image, rel=1e-9)
