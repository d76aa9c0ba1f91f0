"""A Llama's `head_dim` of its own (q and o projections hidden x heads * head_dim, not square):
parameters, FLOPs, memory against real transformers models, the located errors, the config
the programs pass to transformers, the `--smoke` shrink, and the programs run on the CPU.

The model the GPU check measures is one tensor-parallel-8 rank of Llama-2-70B on one device:
hidden 8192, 8 query heads, 1 key/value head, head dim 128, intermediate 3584.
"""

from __future__ import annotations

import ast
import re

import pytest
from census_helpers import llama_cost, llama_generate_flops, llama_params
from codegen_helpers import plan_literal

from benchc.codegen.points import render_point
from benchc.pipeline import plan_spec
from benchc.plan.memory import estimate_memory, kv_cache, parameters
from benchc.plan.roofline import roofline

from helpers import REPO, run_cli

# hidden, layers, heads, kv_heads, head_dim, intermediate, vocab
RANK_70B = (8192, 40, 8, 1, 128, 3584, 32000)
SHAPES = [
    RANK_70B,
    (128, 2, 4, 2, 16, 256, 1024),  # narrower heads than hidden / heads
    (64, 2, 4, 4, 32, 128, 256),  # wider
]
RANK_SETTINGS = ("parallel.tensor=1", "cluster.devices_per_node=1", "model.llama.hidden=8192",
                 "model.llama.heads=8", "model.llama.kv_heads=1", "model.llama.head_dim=128",
                 "model.llama.intermediate=3584", "model.llama.layers=40")  # fmt: skip


def _config(hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, **extra):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=kv_heads, head_dim=head_dim, intermediate_size=intermediate,
                       vocab_size=vocab, **extra)  # fmt: skip


def _spec(write, shape, work="infer { batch = 3; input_tokens = 16; output_tokens = 24 }", head_dim=True):
    hidden, layers, heads, kv_heads, head_dim_value, intermediate, vocab = shape
    own = f" head_dim = {head_dim_value};" if head_dim else ""
    text = (f"experiment rank {{\n  model llama {{ hidden = {hidden}; layers = {layers}; heads = {heads}; "
            f"kv_heads = {kv_heads};{own} intermediate = {intermediate}; vocab = {vocab} }}\n"
            f"  {work}\n  targets = [h200]\n}}\n")  # fmt: skip
    return write("s.bench", text)


def _plan(path, *overrides):
    (plan,) = plan_spec(path, [], list(overrides)).plans
    return plan


# ------------------------------------------------------------------ parameters, FLOPs, memory


@pytest.mark.parametrize("shape", SHAPES, ids=["70b-rank", "narrow", "wide"])
def test_parameters_equal_transformers_on_meta(write, shape):
    import torch
    from transformers import LlamaForCausalLM

    hidden, layers, heads, kv_heads, head_dim, intermediate, vocab = shape
    with torch.device("meta"):
        model = LlamaForCausalLM(_config(*shape))
    counted = sum(p.numel() for p in model.parameters())
    attention = model.model.layers[0].self_attn
    assert attention.q_proj.weight.shape == (heads * head_dim, hidden)
    assert attention.k_proj.weight.shape == (kv_heads * head_dim, hidden)
    assert attention.o_proj.weight.shape == (hidden, heads * head_dim)
    args = (hidden, layers, heads, kv_heads, intermediate, vocab)
    assert llama_params(*args, head_dim=head_dim) == counted
    plan = _plan(_spec(write, shape))
    assert plan.model.head_dim == head_dim
    assert plan.cost.params == parameters(plan)["transformer"] == counted
    if shape == RANK_70B:
        assert counted == 4_803_141_632  # 40 layers of 107.0M, embeddings and head 524.3M


def test_tensor_parallel_weights_and_kv_cache_equal_real_tensors_on_meta(write):
    """Tensor parallel 2 of a model whose q is narrower than hidden: each layer's projections
    split, the rest whole; transformers' StaticCache sized by head_dim, not hidden / heads."""
    import torch
    from transformers import LlamaForCausalLM
    from transformers.cache_utils import StaticCache

    shape = SHAPES[1]
    plan = _plan(_spec(write, shape), "cluster.devices_per_node=2", "parallel.tensor=2")
    config = _config(*shape)
    with torch.device("meta"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    split = re.compile(r"\.(q|k|v|o|gate|up|down)_proj\.")
    local = sum(
        p.numel() * p.element_size() / (2 if split.search(n) else 1) for n, p in model.named_parameters()
    )
    memory = estimate_memory(plan)
    assert memory.part("weights") == local
    config.num_key_value_heads //= 2
    cache = StaticCache(config=config, max_batch_size=3, max_cache_len=16 + 24, device="meta",
                        dtype=torch.bfloat16)  # fmt: skip
    layers = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    assert layers[0].shape[-1] == 16
    assert kv_cache(plan) == memory.part("kv_cache") == sum(t.numel() * t.element_size() for t in layers)


@pytest.mark.parametrize("shape", SHAPES[1:], ids=["narrow", "wide"])
def test_flops_match_torch_flop_counter(shape):
    """A forward over 32 tokens and generate with a dynamic cache (16 -> 8 tokens): equal,
    but for RoPE's outer product (head_dim / 2 x tokens fed, 2 FLOPs each), which the counter
    also sees and model FLOPs leave out."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaForCausalLM

    hidden, layers, heads, kv_heads, head_dim, intermediate, vocab = shape
    args = (hidden, layers, heads, kv_heads, intermediate, vocab)
    torch.manual_seed(0)
    model = LlamaForCausalLM(_config(*shape, attn_implementation="sdpa")).eval()
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(0, vocab, (1, 32)))
    cost = llama_cost(*args, 32, head_dim=head_dim)
    assert counter.get_total_flops() == cost.forward_flops_per_sample + head_dim * 32
    prompt = torch.randint(0, vocab, (1, 16))
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8,
                       min_new_tokens=8, do_sample=False, pad_token_id=0)  # fmt: skip
    modelled = llama_generate_flops(*args, 16, 8, head_dim=head_dim)
    assert counter.get_total_flops() == modelled + head_dim * (16 + 8 - 1)


def test_a_head_dim_equal_to_hidden_over_heads_changes_no_figure_and_no_program(write):
    """Written or left out, hidden / heads gives the same parameters, FLOPs, memory, roofline
    and model config: results of specs without head_dim stay what they were."""
    shape = (256, 4, 4, 2, 64, 512, 1000)
    plans = [_plan(_spec(write, shape, head_dim=written)) for written in (False, True)]
    assert plans[0].model == plans[1].model and plans[0].cost == plans[1].cost
    assert estimate_memory(plans[0]) == estimate_memory(plans[1])
    assert roofline(plans[0]).record() == roofline(plans[1]).record()
    configs = [plan_literal(render_point(p)["bench.py"])["model"]["config"] for p in plans]
    assert configs[0] == configs[1] and "head_dim" not in configs[0]
    args = (8192, 80, 64, 8, 28672, 32000)  # the preset's Llama-2-70B
    assert llama_params(*args) == llama_params(*args, head_dim=128) == 68_976_648_192
    assert llama_generate_flops(*args, 128, 2048) == llama_generate_flops(*args, 128, 2048, head_dim=128)


def test_the_program_passes_head_dim_to_transformers_only_when_it_is_its_own(write):
    config = plan_literal(render_point(_plan(_spec(write, SHAPES[1])))["bench.py"])["model"]["config"]
    assert config["head_dim"] == 16 and config["hidden_size"] == 128 and config["num_attention_heads"] == 4


# ------------------------------------------------------------------ checks


def test_an_odd_head_dim_is_an_error_located_at_it(write):
    path = _spec(write, (128, 2, 4, 2, 15, 256, 1024))
    result = run_cli("check", str(path))
    assert result.code == 2
    line = path.read_text().splitlines()[1]
    column = line.index("15") + 1
    assert f"s.bench:2:{column}: error: llama head_dim is 15, an odd number" in result.err
    assert "\n  |" + " " * column + "^^\n" in result.err
    assert "rotary position embeddings rotate pairs" in result.err
    assert "Traceback" not in result.err


def test_an_odd_head_dim_from_a_set_is_located_in_the_argument(write):
    result = run_cli("check", str(_spec(write, SHAPES[1])), "--set", "model.llama.head_dim=7")
    assert result.code == 2 and "--set[1]:1:" in result.err and "head_dim is 7, an odd number" in result.err


def test_a_head_dim_of_its_own_lifts_the_hidden_over_heads_rule(write):
    """hidden 96 over 5 heads: an error without head_dim (as before), fine with it."""
    assert run_cli("check", str(_spec(write, (96, 2, 5, 5, 16, 256, 1024)))).code == 0
    result = run_cli("check", str(_spec(write, (96, 2, 5, 5, 16, 256, 1024), head_dim=False)))
    assert result.code == 2 and "llama hidden (96) is not divisible by heads (5)" in result.err


def test_head_dim_must_be_positive_and_an_integer(write):
    for value in ("0", "12.5"):
        result = run_cli("check", str(_spec(write, SHAPES[1])), "--set", f"model.llama.head_dim={value}")
        assert result.code == 2 and "--set[1]" in result.err and "Traceback" not in result.err, result.err


# ------------------------------------------------------------------ --smoke and the CPU


def test_smoke_keeps_a_head_dim_of_its_own_shrunk(write):
    from benchc.catalog.presets import SMOKE_LLAMA_HEAD_DIM, SMOKE_MODEL

    (plan,) = plan_spec(REPO / "specs/beluga-infer.bench", [], list(RANK_SETTINGS), smoke=True).plans
    m = plan.model
    assert m.head_dim == SMOKE_LLAMA_HEAD_DIM != m.hidden // m.heads and m.kv_heads < m.heads
    assert plan.cluster.world_size == 1 and plan.parallel.tensor == 1
    (plain,) = plan_spec(REPO / "specs/beluga-infer.bench", [], list(RANK_SETTINGS[:-4]), smoke=True).plans
    assert plain.model.head_dim == SMOKE_MODEL["llama"]["hidden"] // SMOKE_MODEL["llama"]["heads"]
    # written equal to hidden / heads: the default path, shrunk as if not written
    (same,) = plan_spec(REPO / "specs/beluga-infer.bench", [], ["model.llama.head_dim=128"], smoke=True).plans
    assert same.model.head_dim == plain.model.head_dim


@pytest.mark.integration
@pytest.mark.parametrize(
    "overrides, processes",
    [(RANK_SETTINGS, 1), (("model.llama.head_dim=64",), 2)],
    ids=["70b-rank-one-device", "tensor-parallel-2"],
)
def test_the_program_runs_on_the_cpu_and_its_tokens_equal_transformers_greedy_generate(
    tmp_path, overrides, processes
):
    """S5 shrunk with a head_dim of its own, on one process (the GPU check's rank model) and
    tensor parallel over two (DTensor splits q narrower than hidden): the first sequence's
    tokens equal transformers' own greedy generate of the same tiny model, prompt and seed."""
    import torch
    from test_run_cpu import compile_smoke_and_launch
    from transformers import LlamaConfig, LlamaForCausalLM

    proc, metrics, point = compile_smoke_and_launch(
        tmp_path, "beluga-infer.bench", "beluga_70b_infer", "infer.precision=fp32", *overrides
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    program = ast.parse((point / "bench.py").read_text())
    plan = next(ast.literal_eval(n.value) for n in program.body
                if isinstance(n, ast.Assign) and n.targets[0].id == "PLAN")  # fmt: skip
    config, run = plan["model"]["config"], plan["infer"]
    assert config["head_dim"] * config["num_attention_heads"] != config["hidden_size"]
    assert plan["parallel"]["tensor"] == processes == metrics["world_size"]

    torch.manual_seed(run["seed"])  # the program's: the weights drawn from the seed
    model = LlamaForCausalLM(LlamaConfig(**{**config, "attn_implementation": "sdpa"})).eval()
    prompts = torch.Generator().manual_seed(run["seed"])  # the program's: a generator of its own
    prompt = torch.randint(0, config["vocab_size"], (run["batch"], run["input_tokens"]), generator=prompts)
    with torch.no_grad():
        reference = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                   max_new_tokens=run["output_tokens"], min_new_tokens=run["output_tokens"],
                                   do_sample=False, pad_token_id=0)  # fmt: skip
    assert metrics["status"] == "ok"
    assert metrics["generation"]["first_sequence"] == reference[0, run["input_tokens"] :].tolist()
    assert metrics["generation"]["tpot_s"] > 0
