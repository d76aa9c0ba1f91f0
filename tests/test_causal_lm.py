"""`model causal_lm`: any transformers causal LM of the six families, counted from the model
itself and run as transformers runs it.

Per family (tiny configs, real transformers models): the plan's parameters equal the model's
own count, its forward FLOPs torch's FLOP counter over the model with eager attention, and the
generated program decodes the same tokens as transformers' greedy generate from the same
weights. Presets: the published parameter counts, counted afresh on the meta device, and the
shipped table equal to a fresh count. The located refusals of check.
"""

from __future__ import annotations

import json

import pytest
import torch
from program_helpers import load_program

from benchc.catalog.causal_lm import FAMILIES, PRESETS, PUBLISHED_PARAMS
from benchc.codegen.points import render_point
from benchc.diagnostics import BenchError
from benchc.pipeline import plan_spec
from benchc.plan.census import _shipped, canonical, count_afresh
from benchc.plan.census_table import preset_configs

from helpers import point_in, run_cli

FAMILY_SETTINGS = {
    "llama": 'model_type = "llama"',
    "mistral": 'model_type = "mistral"; sliding_window = 24',
    "mixtral": 'model_type = "mixtral"; experts = 4; experts_per_token = 2',
    "qwen2": 'model_type = "qwen2"; tie_embeddings = true',
    "qwen3": 'model_type = "qwen3"; head_dim = 32',
    "qwen3_moe": 'model_type = "qwen3_moe"; experts = 4; experts_per_token = 2',
}
SHAPE = (
    "hidden = 64; layers = 2; heads = 4; kv_heads = 2; intermediate = 96; vocab = 256; max_positions = 256"
)
INFER = "infer { precision = fp32; batch = 2; input_tokens = 12; output_tokens = 20; steps = 3; warmup = 1 }"
TRAIN = (
    "train { precision = fp32; batch = 2; seq_len = 24; steps = 3; warmup = 1; optimizer = sgd(lr = 0.01) }"
)


def family_spec(write, family: str, work: str = INFER, extra: str = "", name: str = "f.bench",
                targets: str = "cpu"):  # fmt: skip
    text = (f"experiment fam {{\n  model causal_lm {{ {FAMILY_SETTINGS[family]}; {SHAPE}{extra} }}\n"
            f"  {work}\n  targets = [{targets}]\n}}\n")  # fmt: skip
    return write(name, text)


def plan_of(path, *overrides):
    (plan,) = plan_spec(path, [], list(overrides)).plans
    return plan


def reference_model(plan, attention: str = "eager"):
    """The plan's model as transformers builds it from the plan's config."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = {k: v for k, v in json.loads(plan.model.config).items() if k != "model_type"}
    built = AutoConfig.for_model(plan.model.model_type, attn_implementation=attention, **config)
    return AutoModelForCausalLM.from_config(config=built)


# ------------------------------------------------------------------ counting


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_counts_as_transformers_builds_it(write, family):
    """Parameters equal the model's own; a forward's FLOPs are within 1% of torch's counter
    over the model with eager attention (RoPE's outer product and the norms are what differs)."""
    from torch.utils.flop_counter import FlopCounterMode

    plan = plan_of(family_spec(write, family, TRAIN))
    torch.manual_seed(0)
    model = reference_model(plan).eval()
    assert plan.cost.params == sum(p.numel() for p in model.parameters())
    tokens = torch.randint(0, 256, (1, 24))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=tokens)
    assert plan.cost.forward_flops_per_sample == pytest.approx(counter.get_total_flops(), rel=0.01)
    census = plan.model.census
    assert census.layer_class == type(model.model.layers[0]).__name__
    if family in ("mixtral", "qwen3_moe"):  # every expert held, 2 of 4 computed per token
        assert plan.model.experts == 4 and census.active_params < census.params
        idle = census.expert_matmul // 2
        assert census.params - census.active_params == idle
    if family == "qwen2":  # tied: one matrix, counted once; the head's FLOPs all the same
        assert model.lm_head.weight is model.model.embed_tokens.weight and census.tied
    if family == "mistral":
        assert plan.model.sliding_window == 24 and set(census.windows) == {24}


def test_a_sliding_window_caps_the_keys_each_query_attends():
    """The stated convention: no causal discount, at most W keys per query (docs/estimate.md)."""
    from census_helpers import llama_census

    from benchc.plan.census import Census
    from benchc.plan.flops import causal_lm_cost, causal_lm_generate_flops

    full = llama_census(64, 2, 4, 2, 96, 256)
    windowed = Census(**{**{n: getattr(full, n) for n in full.__dataclass_fields__}, "windows": (16, 16)})
    attention = lambda cost, matmul: cost.forward_flops_per_sample - matmul  # noqa: E731
    matmul = 2.0 * (full.active_matmul + full.head) * 64
    assert attention(causal_lm_cost(full, 64), matmul) == 2 * 4 * 64 * 64 * 64
    assert attention(causal_lm_cost(windowed, 64), matmul) == 2 * 4 * 64 * 64 * 16
    assert (
        causal_lm_cost(windowed, 12).forward_flops_per_sample
        == causal_lm_cost(full, 12).forward_flops_per_sample
    )
    # decode: the context grows to the window, then stays there
    for ins, outs in ((4, 40), (20, 5), (16, 1)):
        layers = 2.0 * full.active_matmul * (ins + outs - 1) + 2.0 * full.head * outs
        keys = ins * min(ins, 16) + sum(min(ins + t, 16) for t in range(1, outs))
        assert causal_lm_generate_flops(windowed, ins, outs) == layers + 2 * 4 * 64 * keys


@pytest.mark.integration
def test_presets_have_the_published_parameter_counts_counted_afresh():
    """Every preset counted now on the meta device (one child process): the published figures
    where there are some, and the table benchc ships equal to the fresh count."""
    configs = preset_configs()
    fresh = {canonical(c): answer for c, answer in zip(configs, count_afresh(configs), strict=True)}
    assert fresh == _shipped()
    from benchc.catalog.causal_lm import transformers_config

    counted = {name: fresh[canonical(transformers_config(p))]["params"] for name, p in PRESETS.items()}
    for name, published in PUBLISHED_PARAMS.items():
        assert counted[name] == published, name
    assert counted["llama-3.1-70b"] == 70_553_706_496
    assert counted["qwen3-8b"] == 8_190_735_360
    assert counted["qwen3-30b-a3b"] == 30_532_122_624


def test_estimate_of_mixtral_on_h100_shows_total_and_active_parameters(write):
    """Acceptance 3: tensor 8 on h100; the FLOPs per token come from the active parameters."""
    path = write("m.bench", 'experiment m {\n  model causal_lm { preset = "mixtral-8x7b" }\n'
                 "  infer { batch = 8 }\n  cluster { devices_per_node = 8 }\n  parallel { tensor = 8 }\n"
                 "  targets = [h100]\n}\n")  # fmt: skip
    result = run_cli("estimate", str(path), "--json")
    assert result.code == 0, result.err
    (record,) = json.loads(result.out)["estimates"]
    assert record["parameters"] == 46_702_792_704 and record["active_parameters"] == 12_879_925_248
    text = run_cli("estimate", str(path)).out
    assert "46,702,792,704 in all; 12,879,925,248 active per token (2 of 8 experts" in text
    plan = plan_of(path)
    # a decode token: 2 FLOPs per active layer weight and head weight, + attention (small here)
    census = plan.model.census
    matmul = 2.0 * (census.active_matmul + census.head)
    decode = (plan.cost.forward_flops_per_sample - _prefill(plan)) / (plan.workload.output_tokens - 1)
    assert matmul < decode < 1.05 * matmul
    assert census.active_matmul + census.embedding + census.head + 2 * 4096 * 32 + 4096 == pytest.approx(
        census.active_params, rel=1e-9
    )


def _prefill(plan) -> float:
    from benchc.plan.flops import causal_lm_generate_flops

    return causal_lm_generate_flops(plan.model.census, plan.workload.input_tokens, 1)


# ------------------------------------------------------------------ the programs


@pytest.mark.integration
@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_decodes_transformers_greedy_tokens(write, tmp_path, family):
    """The program's model (its own build, attention kernel and static-cache decode loop) and
    transformers' greedy generate (eager attention, its own cache) from the same weights and
    prompt make the same tokens: sliding window and expert routing included."""
    path = family_spec(write, family)
    result = run_cli("compile", str(path), "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    program = load_program(point_in(tmp_path / "out/fam/cpu") / "bench.py")
    loop = _decodes_greedy_tokens(program, plan_of(path))
    if family == "mistral":  # its window's layers read from the window's first bucket on
        assert loop.cache.sliding == frozenset({0, 1}) and loop.cache.window_from > 0


def _decodes_greedy_tokens(module, plan):
    """The program's decode loop and transformers' greedy generate (eager attention, its own
    cache) from the same weights and prompt make the same tokens, with the plan's decode bucket
    and with buckets of 4 keys (a sliding window then reads from its first bucket on, not from
    the cache's start). The loop of 4-key buckets, for its cache's last reads."""
    model_plan, run = module.PLAN["model"], module.PLAN["infer"]
    torch.manual_seed(0)
    model = module.build_model(model_plan).eval()
    reference = reference_model(plan).eval()
    reference.load_state_dict(model.state_dict())
    prompt = torch.randint(0, 256, (run["batch"], run["input_tokens"]))
    tokens = run["output_tokens"]
    with torch.no_grad():
        expected = reference.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False, pad_token_id=0,
            max_new_tokens=tokens, min_new_tokens=tokens,
        )  # fmt: skip
        assert torch.equal(module.DecodeLoop(model, prompt, tokens, None)(tokens), expected)
        loop = module.DecodeLoop(model, prompt, tokens, None, bucket=4)
        assert torch.equal(loop(tokens), expected)
    return loop


@pytest.mark.integration
@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_trains_and_generates_on_the_cpu(write, tmp_path, family):
    """A training point and a generation point: Llama's through benchc run, as a user runs them;
    every other family's program run from the warm process (tests/warm_launch.py): what differs
    between families is their program, not benchc run's launch."""
    for work, name in ((TRAIN, "t.bench"), (INFER, "i.bench")):
        path = family_spec(write, family, work, name=name)
        out = tmp_path / f"out-{work[:5]}"
        assert run_cli("compile", str(path), "-o", str(out)).code == 0
        point = point_in(out / "fam/cpu")
        if family == "llama":
            result = run_cli("run", str(point), "--db", str(tmp_path / "r.db"))
            assert result.code == 0, result.out[-2000:] + result.err[-2000:]
            metrics = json.loads(next((point / "runs").glob("*/metrics.json")).read_text())
        else:
            metrics = _launch(point)
        assert metrics["status"] == "ok"
        if work == TRAIN:
            assert all(loss == loss and loss > 0 for loss in metrics["loss"]["all"])
        else:
            assert len(metrics["generation"]["first_sequence"]) == 20


@pytest.mark.integration
def test_a_window_on_some_layers_only_decodes_transformers_greedy_tokens(tmp_path, write):
    """Qwen2 with its sliding window from max_window_layers on (layer 0 full, layer 1 windowed):
    the loop's mask per layer type equals transformers' own."""
    from transformers import Qwen2Config

    config = Qwen2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=96, vocab_size=256, use_sliding_window=True, sliding_window=8,
                         max_window_layers=1)  # fmt: skip
    config.save_pretrained(tmp_path / "q")
    path = write("w.bench", f'experiment fam {{\n  model causal_lm {{ config = "{tmp_path / "q"}" }}\n'
                 f"  {INFER}\n  targets = [cpu]\n}}\n")  # fmt: skip
    plan = plan_of(path)
    assert plan.model.census.windows == (None, 8) and plan.model.sliding_window == 8
    assert run_cli("compile", str(path), "-o", str(tmp_path / "out")).code == 0
    loop = _decodes_greedy_tokens(load_program(point_in(tmp_path / "out/fam/cpu") / "bench.py"), plan)
    assert loop.cache.sliding == frozenset({1}) and loop.cache.window_from > 0  # layer 1 only


# ------------------------------------------------------------------ refusals


def _errors(path, *overrides) -> list:
    with pytest.raises(BenchError) as caught:
        plan_spec(path, [], list(overrides))
    return caught.value.diagnostics


def test_an_unknown_model_type_is_refused_at_it_with_the_families(write):
    path = write("u.bench", 'experiment u {\n  model causal_lm { model_type = "gpt2"; hidden = 64; '
                 "layers = 2; heads = 4; intermediate = 96 }\n  infer { batch = 1 }\n"
                 "  targets = [cpu]\n}\n")  # fmt: skip
    (error,) = _errors(path)
    assert 'model_type "gpt2" is not a family benchc builds' in error.message
    assert error.span.line == 2 and "llama, mistral, mixtral, qwen2, qwen3, qwen3_moe" in error.hint


def test_a_family_setting_on_another_family_is_refused_at_it(write):
    path = family_spec(write, "llama", extra="; experts = 4")
    (error,) = _errors(path)
    assert error.message == "model_type llama has no experts" and "mixtral, qwen3_moe" in error.hint
    more = family_spec(write, "mixtral", name="g.bench")
    errors = _errors(more, "model.causal_lm.experts_per_token=6")
    assert any("experts_per_token (6) is more than experts (4)" in e.message for e in errors)


def test_a_config_folder_gives_the_family_and_the_spec_overrides_it(write, tmp_path):
    from transformers import Qwen2Config

    config = Qwen2Config(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=96, vocab_size=300, rms_norm_eps=1e-5)  # fmt: skip
    folder = tmp_path / "q"
    config.save_pretrained(folder)
    path = write("c.bench", f'experiment c {{\n  model causal_lm {{ config = "{folder}"; layers = 2 }}\n'
                 f"  {INFER}\n  targets = [cpu]\n}}\n")  # fmt: skip
    plan = plan_of(path)
    assert (plan.model.model_type, plan.model.layers, plan.model.vocab) == ("qwen2", 2, 300)
    assert json.loads(plan.model.config)["rms_norm_eps"] == 1e-5
    program_config = render_point(plan)["bench.py"]
    assert '"rms_norm_eps": 1e-05' in program_config
    assert "architectures" not in program_config and "transformers_version" not in program_config


@pytest.mark.parametrize("content, expected", [
    ({"model_type": "gpt2"}, 'is for model_type "gpt2", not a family benchc builds'),
    ({"model_type": "llama", "quantization_config": {"quant_method": "gptq"}}, "sets quantization_config"),
    ({"hidden_size": 64}, "names no model_type"),
    ("not json", "is not JSON"),
])  # fmt: skip
def test_a_config_folder_benchc_cannot_build_is_refused_at_config(write, tmp_path, content, expected):
    (tmp_path / "c").mkdir()
    text = content if isinstance(content, str) else json.dumps(content)
    (tmp_path / "c" / "config.json").write_text(text)
    path = write("c.bench", f'experiment c {{\n  model causal_lm {{ config = "{tmp_path / "c"}" }}\n'
                 f"  {INFER}\n  targets = [cpu]\n}}\n")  # fmt: skip
    errors = _errors(path)
    assert any(expected in e.message and e.span.line == 2 for e in errors), [e.message for e in errors]


def test_model_llama_refuses_a_config_of_another_family(write, tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "config.json").write_text(json.dumps({"model_type": "mistral"}))
    path = write("l.bench", f'experiment l {{\n  model llama {{ config = "{tmp_path / "c"}" }}\n'
                 f"  {INFER}\n  targets = [cpu]\n}}\n")  # fmt: skip
    errors = _errors(path)
    assert any('the config is for model_type "mistral"' in e.message and "model causal_lm" in e.hint
               for e in errors)  # fmt: skip


def test_gaudi_mixtral_runs_fused_attention_only(write):
    path = family_spec(write, "mixtral", targets="gaudi2")
    errors = _errors(path, "infer.attention=sdpa", "infer.precision=bf16")
    assert any("always runs FusedSDPA" in e.message for e in errors)
    (plan,) = plan_spec(path, ["gaudi2"], ["infer.attention=fused", "infer.precision=bf16"]).plans
    program = render_point(plan)["bench.py"]
    assert "GaudiMixtralForCausalLM.forward: FusedSDPA always" in program
    assert '"use_flash_attention": True' not in program.split("def forward_options")[1].split("def ")[0]


def test_a_tensor_degree_that_does_not_divide_an_experts_width_is_refused(write):
    path = family_spec(write, "mixtral")
    errors = _errors(path, "parallel.tensor=4", "cluster.devices_per_node=4", "model.causal_lm.kv_heads=4",
                     "model.causal_lm.intermediate=90")  # fmt: skip
    assert any("does not divide the model's intermediate (90)" in e.message for e in errors)


# ------------------------------------------------------------------ two CPU processes


def _launch(point, env=None):
    import os
    import sys

    from test_run_cpu import launch_nodes

    proc = launch_nodes(
        point, {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", **(env or {})}, warm=True
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((point / "metrics.json").read_text())


@pytest.mark.integration
@pytest.mark.parametrize("family", ["mixtral", "qwen2"])
def test_tensor_parallel_generation_by_the_models_own_plan_on_two_cpus(write, tmp_path, family):
    """transformers' base_model_tp_plan applied by DTensor: each expert of a mixture split by
    columns and rows, the router gathered whole; Qwen2's q/k/v biases split with their rows."""
    path = family_spec(write, family, INFER.replace("infer {", "infer { attention = sdpa;"),
                       targets="cpu")  # fmt: skip
    sets = ["--set", "cluster.devices_per_node=2", "--set", "parallel.tensor=2"]
    assert run_cli("compile", str(path), "-o", str(tmp_path / "out"), *sets).code == 0
    point = point_in(tmp_path / "out/fam/cpu")
    program = (point / "bench.py").read_text()
    assert "model.config.base_model_tp_plan.items()" in program
    metrics = _launch(point)
    assert metrics["status"] == "ok" and metrics["world_size"] == 2
    assert len(metrics["generation"]["first_sequence"]) == 20


def as_gaudi_split(program) -> None:
    """A CPU program's tensor parallel made the Gaudi program's: DeepSpeed inference's AutoTP
    (deepspeed_tensor_parallel, in the core every target shares) in place of DTensor, over
    torch.distributed's all-reduce as tests/test_run_cpu.py's Llama path."""
    text = program.read_text()
    dtensor = 'return tensor_parallel(model, "cpu", degree)'
    assert text.count(dtensor) == 1
    cpu_all_reduce = (
        "import deepspeed.comm\n"
        "        deepspeed.init_distributed()\n"
        "        deepspeed.comm.comm.cdb.shm_vector_kernel_level = 0\n        "
    )
    split = "return deepspeed_tensor_parallel(model, degree, dtype, graphs)"
    program.write_text(text.replace(dtensor, cpu_all_reduce + split))


@pytest.mark.integration
def test_gaudi_s_deepspeed_split_of_a_mixture_of_experts_runs_on_two_cpus(tmp_path):
    """The Gaudi program's path for Mixtral, run on the CPU: DeepSpeed inference's AutoTP with
    no injection policy (its own rules split each expert's w1/w3 by columns and w2 by rows),
    as optimum-habana's text-generation example runs Mixtral."""
    from test_run_cpu import compile_smoke

    point = compile_smoke(tmp_path, "mixtral-infer.bench", "mixtral_infer")
    as_gaudi_split(point / "bench.py")
    metrics = _launch(point)
    assert metrics["status"] == "ok" and metrics["world_size"] == 2
    assert len(metrics["generation"]["first_sequence"]) == metrics["generation"]["output_tokens"]


@pytest.mark.integration
def test_fsdp2_trains_a_mixture_of_experts_wrapping_its_own_decoder_layer_on_two_cpus(write, tmp_path):
    path = family_spec(write, "qwen3_moe", TRAIN)
    sets = [
        "--set",
        "cluster.devices_per_node=2",
        "--set",
        "parallel.sharding=fsdp",
        "--set",
        "train.batch=1",
    ]
    assert run_cli("compile", str(path), "-o", str(tmp_path / "out"), *sets).code == 0
    point = point_in(tmp_path / "out/fam/cpu")
    metrics = _launch(point)
    assert metrics["status"] == "ok" and metrics["world_size"] == 2
    assert metrics["runtime_detail"]["wrapper"] == "FSDPQwen3MoeForCausalLM"
    losses = metrics["loss"]["all"]
    assert all(loss == loss for loss in losses)


# ------------------------------------------------------------------ Gaudi, statically


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("work", ["train", "infer"])
def test_each_family_s_gaudi_program_binds_to_optimum_habana(write, family, work):
    """The Gaudi programs of every family, which cannot run here: every call bound to the
    installed libraries (optimum-habana's from its source), habana symbols on the allow-list,
    the family's Gaudi class swapped in by adapt_transformers_to_gaudi (its source says so),
    and the forward options passed all named by that class's forward."""
    from importlib.util import find_spec
    from pathlib import Path

    from static_checks import _source_signature, check_program, returned_dict_keys

    from benchc.catalog.causal_lm import GAUDI_CLASSES
    from benchc.catalog.habana import HABANA_SYMBOLS

    body = (TRAIN if work == "train" else INFER).replace(
        "precision = fp32", "precision = bf16; attention = fused"
    )
    path = family_spec(write, family, body, targets="gaudi2")
    (plan,) = plan_spec(path, ["gaudi2"], ["parallel.sharding=zero3"] if work == "train" else []).plans
    program = render_point(plan)["bench.py"]
    report = check_program(program)
    assert report.problems == []
    assert report.habana_symbols <= set(HABANA_SYMBOLS)
    gaudi_class = GAUDI_CLASSES[family]
    assert f"optimum-habana's Gaudi version, {gaudi_class}" in program
    root = Path(find_spec("optimum.habana").submodule_search_locations[0]) / "transformers"
    adapted = (root / "modeling_utils.py").read_text()
    cls = gaudi_class.removeprefix("Gaudi")
    assert f"transformers.models.{family}.modeling_{family}.{cls} = {gaudi_class}" in adapted
    forward = _source_signature(
        f"optimum.habana.transformers.models.{family}.modeling_{family}.{gaudi_class}.forward"
    )
    assert returned_dict_keys(program, "forward_options") <= set(forward.parameters)


# ------------------------------------------------------------------ weights folders


def _save(folder, family: str, **config):
    """A tiny real model of the family, saved by save_pretrained (safetensors)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 96, "vocab_size": 256, **config}  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config=AutoConfig.for_model(family, **shape))
    model.save_pretrained(folder)
    return model


@pytest.mark.integration
@pytest.mark.parametrize("family, config", [
    ("qwen2", {"tie_word_embeddings": True}),
    ("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2}),
])  # fmt: skip
def test_a_weights_folder_of_any_family_gives_the_model_and_is_run(write, tmp_path, family, config):
    """The folder's config gives the family and the shape, its tensors are held to the model
    that config builds (counted on the meta device), and a run loads it."""
    model = _save(tmp_path / "w", family, **config)
    path = write("w.bench", f'experiment fam {{\n  model causal_lm {{ weights = "{tmp_path / "w"}" }}\n'
                 f"  {INFER}\n  targets = [cpu]\n}}\n")  # fmt: skip
    plan = plan_of(path)
    assert plan.model.model_type == family and plan.cost.params == sum(p.numel() for p in model.parameters())
    assert plan.model.tie_embeddings == bool(config.get("tie_word_embeddings"))
    assert run_cli("compile", str(path), "-o", str(tmp_path / "out")).code == 0
    result = run_cli("run", str(point_in(tmp_path / "out/fam/cpu")), "--db", str(tmp_path / "r.db"))
    assert result.code == 0, result.out[-2000:] + result.err[-2000:]


@pytest.mark.integration
def test_a_weights_folder_whose_tensors_are_not_its_config_s_model_is_refused_at_weights(write, tmp_path):
    _save(tmp_path / "w", "mixtral", num_local_experts=4, num_experts_per_tok=2)
    config = json.loads((tmp_path / "w" / "config.json").read_text())
    (tmp_path / "w" / "config.json").write_text(json.dumps({**config, "num_local_experts": 3}))
    path = write("w.bench", f'experiment fam {{\n  model causal_lm {{ weights = "{tmp_path / "w"}" }}\n'
                 f"  {INFER}\n  targets = [cpu]\n}}\n")  # fmt: skip
    errors = _errors(path)
    assert any("do not match the model its config.json describes" in e.message and "experts.3" in e.message
               and e.span.line == 2 for e in errors), [e.message for e in errors]  # fmt: skip


@pytest.mark.integration
def test_each_rank_reads_only_its_part_of_a_sharded_checkpoint(write, tmp_path):
    """A Llama saved in several safetensors shards. On 2 CPU ranks, tensor-parallel generation
    (DTensor's, and Gaudi's DeepSpeed AutoTP run on the CPU), FSDP2 and ZeRO-3 training each
    read at most 0.6 of the checkpoint's bytes per rank (counted by wrapping safetensors'
    reader, tests/readcount/); the tensor-parallel tokens and the ZeRO-3 first loss equal one
    process's from the same weights (each part read where it belongs)."""
    from helpers import REPO

    # mostly layers, split; widths DeepSpeed's AutoTP halves (it cuts in grains of 64)
    model = _save(tmp_path / "w", "llama", num_hidden_layers=4, vocab_size=64, intermediate_size=128)
    model.save_pretrained(tmp_path / "w", max_shard_size="60KB")
    shards = sorted((tmp_path / "w").glob("model-*.safetensors"))
    assert len(shards) > 2
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    infer = INFER.replace("infer {", "infer { attention = sdpa;")
    path = write("w.bench", f'experiment fam {{\n  model causal_lm {{ weights = "{tmp_path / "w"}" }}\n'
                 f"  {infer}\n  targets = [cpu]\n}}\n")  # fmt: skip
    counted = {"PYTHONPATH": str(REPO / "tests" / "readcount")}

    def run(out: str, *sets: str, gaudi_split: bool = False) -> dict:
        args = [a for s in sets for a in ("--set", s)]
        assert run_cli("compile", str(path), "-o", str(tmp_path / out), *args).code == 0
        if gaudi_split:
            as_gaudi_split(point_in(tmp_path / out / "fam/cpu") / "bench.py")
        prefix = tmp_path / f"{out}-read"
        env = {**counted, "BENCHC_TEST_READCOUNT": str(prefix)}
        if not sets:  # one process: no launcher names its rank for the counter
            env.update(RANK="0", WORLD_SIZE="1")
        metrics = _launch(point_in(tmp_path / out / "fam/cpu"), env)
        reads = [json.loads(p.read_text()) for p in sorted(tmp_path.glob(f"{out}-read.*.json"))]
        return metrics, reads

    whole, reads = run("one")
    assert reads and reads[0]["bytes"] >= total  # one process reads it all
    split, reads = run("tp", "cluster.devices_per_node=2", "parallel.tensor=2")
    assert len(reads) == 2 and all(r["bytes"] <= 0.6 * total for r in reads), (reads, total)
    assert split["generation"]["first_sequence"] == whole["generation"]["first_sequence"]
    gaudi, reads = run("gaudi", "cluster.devices_per_node=2", "parallel.tensor=2", gaudi_split=True)
    assert len(reads) == 2 and all(r["bytes"] <= 0.6 * total for r in reads), (reads, total)
    assert gaudi["generation"]["first_sequence"] == whole["generation"]["first_sequence"]
    path.write_text(path.read_text().replace(infer, TRAIN))
    trained, reads = run("fsdp", "cluster.devices_per_node=2", "parallel.sharding=fsdp")
    assert trained["status"] == "ok" and trained["runtime_detail"]["wrapper"].startswith("FSDP")
    assert len(reads) == 2 and all(r["bytes"] <= 0.6 * total for r in reads), (reads, total)
    # ZeRO-3: each rank reads the rows that cover its flat partition of every parameter, and
    # the first loss is one process's from the same weights and batch (each partition read
    # where it belongs)
    alone, _ = run("alone")
    zero3, reads = run("zero3", "cluster.devices_per_node=2", "parallel.sharding=zero3")
    assert zero3["status"] == "ok" and len(reads) == 2
    assert all(r["bytes"] <= 0.6 * total for r in reads), (reads, total)
    assert zero3["loss"]["all"][0] == pytest.approx(alone["loss"]["all"][0], rel=1e-5)


@pytest.mark.integration
def test_a_rank_that_holds_the_whole_model_reads_it_tensor_by_tensor_onto_its_device(write, tmp_path):
    """One process's generation, DDP's and ZeRO-2's training (each rank holds the whole model
    on its device) read a sharded bf16 checkpoint one tensor at a time, each once, straight into the
    model built on the meta device: no whole fp32 copy on the host first. The tokens equal
    transformers' greedy generate from from_pretrained of the folder; DDP's and ZeRO-2's first
    losses on 2 ranks equal one process's."""
    from transformers import AutoModelForCausalLM

    from helpers import REPO

    model = _save(tmp_path / "w", "llama", num_hidden_layers=3)
    model.to(torch.bfloat16).save_pretrained(tmp_path / "w", max_shard_size="60KB")
    largest = max(p.numel() * 2 for p in model.parameters())
    infer = INFER.replace("infer {", "infer { attention = sdpa;")
    path = write("w.bench", f'experiment fam {{\n  model causal_lm {{ weights = "{tmp_path / "w"}" }}\n'
                 f"  {infer}\n  targets = [cpu]\n}}\n")  # fmt: skip

    def run(out: str, *sets: str) -> tuple[dict, list]:
        args = [a for s in sets for a in ("--set", s)]
        assert run_cli("compile", str(path), "-o", str(tmp_path / out), *args).code == 0
        program = (point_in(tmp_path / out / "fam/cpu") / "bench.py").read_text()
        assert "AutoModelForCausalLM.from_pretrained" not in program
        env = {"PYTHONPATH": str(REPO / "tests" / "readcount"), "BENCHC_TEST_READCOUNT": str(tmp_path / out)}
        if not sets:
            env.update(RANK="0", WORLD_SIZE="1")
        metrics = _launch(point_in(tmp_path / out / "fam/cpu"), env)
        return metrics, [json.loads(p.read_text()) for p in sorted(tmp_path.glob(f"{out}.*.json"))]

    generated, reads = run("gen")
    tensors = len(model.state_dict())
    assert reads == [{"bytes": sum(p.numel() * 2 for p in model.parameters()), "tensors": tensors,
                      "largest": largest}]  # fmt: skip
    reference = AutoModelForCausalLM.from_pretrained(tmp_path / "w", torch_dtype=torch.float32).eval()
    prompt = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = reference.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                      do_sample=False, pad_token_id=0, max_new_tokens=20,
                                      min_new_tokens=20)  # fmt: skip
    assert generated["generation"]["first_sequence"] == expected[0, 12:].tolist()
    path.write_text(path.read_text().replace(infer, TRAIN))
    alone, _ = run("one")
    data, reads = run("ddp", "cluster.devices_per_node=2")
    assert data["runtime_detail"]["wrapper"] == "DistributedDataParallel"
    assert [r["tensors"] for r in reads] == [tensors, tensors] and max(r["largest"] for r in reads) == largest
    assert data["loss"]["all"][0] == pytest.approx(alone["loss"]["all"][0], rel=1e-5)
    zero2, reads = run("zero2", "cluster.devices_per_node=2", "parallel.sharding=zero2")
    assert [r["tensors"] for r in reads] == [tensors, tensors] and max(r["largest"] for r in reads) == largest
    assert zero2["loss"]["all"][0] == pytest.approx(alone["loss"]["all"][0], rel=1e-5)


@pytest.mark.integration
def test_the_accelerate_runtime_reads_local_weights_as_the_torch_runtime_does(write, tmp_path):
    """Under runtime = accelerate, ZeRO-3 ranks read only their partitions and DDP and ZeRO-2
    ranks each tensor once onto the device (a sharded checkpoint, 2 CPU ranks, reads counted);
    (FSDP2 would be accelerate's own loading, rank 0 holding the whole folder: check refuses it,
    below). Every first loss equals the torch runtime's one process's from the same weights."""
    from helpers import REPO

    model = _save(tmp_path / "w", "llama", num_hidden_layers=4, vocab_size=64)
    model.save_pretrained(tmp_path / "w", max_shard_size="60KB")
    total, tensors = sum(p.numel() * 4 for p in model.parameters()), len(model.state_dict())
    path = write("w.bench", f'experiment fam {{\n  model causal_lm {{ weights = "{tmp_path / "w"}" }}\n'
                 f"  {TRAIN}\n  targets = [cpu]\n}}\n")  # fmt: skip

    def first_loss(out: str, *sets: str) -> tuple[float, list]:
        args = [a for s in sets for a in ("--set", s)]
        assert run_cli("compile", str(path), "-o", str(tmp_path / out), *args).code == 0
        env = {"PYTHONPATH": str(REPO / "tests" / "readcount"), "BENCHC_TEST_READCOUNT": str(tmp_path / out)}
        if not sets:
            env.update(RANK="0", WORLD_SIZE="1")
        (point,) = (tmp_path / out / "fam/cpu").iterdir()
        metrics = _launch(point, env)
        reads = [json.loads(p.read_text()) for p in sorted(tmp_path.glob(f"{out}.*.json"))]
        return metrics["loss"]["all"][0], reads

    alone, _ = first_loss("alone")
    for sharding in ("zero3", "none", "zero2"):
        loss, reads = first_loss(sharding, "runtime=accelerate", "cluster.devices_per_node=2",
                                 f"parallel.sharding={sharding}")  # fmt: skip
        assert loss == pytest.approx(alone, rel=1e-5), sharding
        if sharding == "zero3":
            assert len(reads) == 2 and all(r["bytes"] <= 0.6 * total for r in reads), (reads, total)
        else:
            assert [r["tensors"] for r in reads] == [tensors, tensors], reads


@pytest.mark.integration
def test_every_way_of_reading_local_weights_is_formatted_and_lint_clean(write, tmp_path):
    """Generation (one device, tensor parallel 2) and training (DDP, FSDP2, ZeRO-2, ZeRO-3, and
    but FSDP2 each under the accelerate runtime) from a weights folder, on cpu, h100 and gaudi2: the
    programs are formatted and lint clean, and each reads the folder the way plan/loading.py
    says."""
    import subprocess
    import sys

    from benchc.plan.loading import weights_by_rank

    _save(tmp_path / "w", "qwen2", tie_word_embeddings=True)
    model = f'model causal_lm {{ weights = "{tmp_path / "w"}" }}'
    infer = INFER.replace("fp32", "bf16; attention = fused")
    train = TRAIN.replace("fp32", "bf16; attention = fused")
    cases = [(infer, ["cluster.devices_per_node=1"]), (infer, ["parallel.tensor=2"])]
    for sharding in ("none", "fsdp", "zero2", "zero3"):
        cases.append((train, [f"parallel.sharding={sharding}"]))
        if sharding != "fsdp":  # accelerate's FSDP2 with weights is refused (the test below)
            cases.append((train, [f"parallel.sharding={sharding}", "runtime=accelerate"]))
    programs, modes = [], set()
    for index, (work, sets) in enumerate(cases):
        path = write(f"w{index}.bench", f"experiment w {{\n  {model}\n  {work}\n"
                     "  cluster { devices_per_node = 2 }\n  targets = [cpu, h100, gaudi2]\n}\n")  # fmt: skip
        for plan in plan_spec(path, [], sets).plans:
            modes.add(weights_by_rank(plan))
            program = tmp_path / f"{index}-{plan.target.name}.py"
            program.write_text(render_point(plan)["bench.py"])
            programs.append(str(program))
    assert modes == {"tensors", "shards", "partitions"}
    ruff = [sys.executable, "-m", "ruff"]
    fmt = subprocess.run([*ruff, "format", "--isolated", "--check", *programs], capture_output=True,
                         text=True)  # fmt: skip
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    lint = subprocess.run([*ruff, "check", "--isolated", "--select", "E,F,W,I,B", "--ignore", "E501",
                           *programs], capture_output=True, text=True)  # fmt: skip
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.integration
def test_a_tied_head_read_from_local_weights_stays_the_embedding_when_split(write, tmp_path):
    """Qwen2 with tied embeddings, from a folder that holds the matrix once. Built on the meta
    device and materialised by to_empty, the head was a second matrix never read: tensor-parallel
    tokens were garbage and FSDP2's first loss NaN. On 2 CPU ranks each equals one process's,
    and Gaudi's DeepSpeed split (run on the CPU) makes the same tokens."""
    _save(tmp_path / "w", "qwen2", tie_word_embeddings=True)
    infer = INFER.replace("infer {", "infer { attention = sdpa;")
    path = write("w.bench", f'experiment fam {{\n  model causal_lm {{ weights = "{tmp_path / "w"}" }}\n'
                 f"  {infer}\n  targets = [cpu]\n}}\n")  # fmt: skip

    def run(out: str, *sets: str, gaudi_split: bool = False) -> dict:
        args = [a for s in sets for a in ("--set", s)]
        assert run_cli("compile", str(path), "-o", str(tmp_path / out), *args).code == 0
        if gaudi_split:
            as_gaudi_split(point_in(tmp_path / out / "fam/cpu") / "bench.py")
        alone = {} if sets else {"RANK": "0", "WORLD_SIZE": "1"}
        return _launch(point_in(tmp_path / out / "fam/cpu"), alone)

    tokens = run("one")["generation"]["first_sequence"]
    for name, gaudi_split in (("tp", False), ("gaudi", True)):
        split = run(name, "cluster.devices_per_node=2", "parallel.tensor=2", gaudi_split=gaudi_split)
        assert split["generation"]["first_sequence"] == tokens, name
    path.write_text(path.read_text().replace(infer, TRAIN))
    first = run("one-train")["loss"]["all"][0]
    sharded = run("fsdp", "cluster.devices_per_node=2", "parallel.sharding=fsdp")
    assert sharded["loss"]["all"][0] == pytest.approx(first, rel=1e-5)


def test_no_layout_holds_a_weights_folder_whole_and_check_refuses_accelerate_s_fsdp2_with_one(
    write, tmp_path
):
    """Every layout reads a weights folder rank by rank (its shards, partitions or slices) or
    tensor by tensor onto its device; the accelerate runtime's FSDP2 would have rank 0 load it
    whole (accelerate's own loading), so check refuses it at weights, saying what to use;
    --smoke (random weights) and accelerate's FSDP2 without weights stay allowed."""
    from benchc.plan.loading import weights_by_rank

    _save(tmp_path / "w", "qwen2", tie_word_embeddings=True)
    path = write("w.bench", f'experiment w {{\n  model causal_lm {{ weights = "{tmp_path / "w"}" }}\n'
                 "  infer { batch = 2 }\n  cluster { devices_per_node = 2 }\n  parallel { tensor = 2 }\n"
                 "  targets = [gaudi2, h100]\n}\n")  # fmt: skip
    gaudi, cuda = plan_spec(path, ["gaudi2", "h100"]).plans
    assert weights_by_rank(cuda) == weights_by_rank(gaudi) == "shards"
    text = path.read_text().replace("infer { batch = 2 }", TRAIN.replace("fp32", "bf16"))
    path.write_text(text.replace("  parallel { tensor = 2 }\n", ""))
    layouts = {"none": "tensors", "zero2": "tensors", "zero3": "partitions", "fsdp": "shards"}
    for sharding, reading in layouts.items():
        (plan,) = plan_spec(path, ["h100"], [f"parallel.sharding={sharding}"]).plans
        assert weights_by_rank(plan) == reading, sharding
        if sharding != "fsdp":
            (plan,) = plan_spec(path, ["h100"], [f"parallel.sharding={sharding}", "runtime=accelerate"]).plans
            assert weights_by_rank(plan) == reading, sharding
    sets = ["-t", "h100", "--set", "runtime=accelerate", "--set", "parallel.sharding=fsdp"]
    refused = run_cli("check", str(path), *sets)
    assert (
        refused.code == 2
        and f"{path}:2:31: error: h100 / runtime-accelerate_sharding-fsdp: under runtime = accelerate"
        in refused.err
    )
    assert "load the weights folder whole on rank 0" in refused.err and "set runtime = torch" in refused.err
    assert run_cli("compile", str(path), "-o", str(tmp_path / "out"), *sets).code == 2
    assert not (tmp_path / "out").exists()  # nothing written
    assert run_cli("check", str(path), "--smoke", *sets).code == 0
    path.write_text(
        path.read_text().replace(f'weights = "{tmp_path / "w"}"', f"{FAMILY_SETTINGS['qwen2']}; {SHAPE}")
    )
    assert run_cli("check", str(path), *sets).code == 0, "random weights under accelerate's FSDP2"
