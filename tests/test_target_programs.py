"""The Gaudi and CUDA branches the CPU cannot take, checked against the installed torch,
transformers, DeepSpeed and optimum-habana (read from their source where importing them
needs the device). Each test names the defect of the expert review it guards against."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
from codegen_helpers import plan_literal, spec_files

from helpers import REPO, run_cli


def site(package_path: str) -> Path:
    import optimum

    return Path(optimum.__path__[0]).parent / package_path


def attention_backends(program: str) -> list[str]:
    """The SDPA backends, in order of priority, the program's Device.attention runs: the
    plan's attention knob, through the adapter's SDPA_BACKENDS table."""
    table, knob = None, None
    for node in ast.parse(program).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "SDPA_BACKENDS":
            table = {k.value: v.attr for k, v in zip(node.value.keys, node.value.values)}
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PLAN":
            knob = ast.literal_eval(node.value)["optimize"]["knobs"]["attention"]
    assert table and knob, "no attention table"
    names = knob.split(">")
    if not all(name in table for name in names):
        return []  # no sdpa_kernel context: torch's SDPA chooses (plain's "sdpa default")
    return [table[name] for name in names]


def test_cuda_generation_runs_kernels_that_take_the_mask_of_a_static_cache():
    from torch.nn.attention import SDPBackend

    program = spec_files("beluga-infer.bench", "h100")["bench.py"]
    assert attention_backends(program) == ["CUDNN_ATTENTION", "EFFICIENT_ATTENTION"]
    plain = spec_files("beluga-infer.bench", "h100", overrides=["optimize=plain"])["bench.py"]
    assert attention_backends(plain) == []  # torch picks a kernel that takes the mask, as shipped
    training = attention_backends(spec_files("beluga-train.bench", "h100")["bench.py"])
    assert training == ["CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"]  # no mask: flash too
    for backends in (attention_backends(program), training):
        assert all(hasattr(SDPBackend, name) for name in backends)


def test_flash_generation_with_a_static_cache_is_refused_with_the_fix():
    result = run_cli(
        "check", "specs/beluga-infer.bench", "-t", "h100", "--set", "infer.attention=flash", cwd=REPO
    )
    assert result.code == 2 and "cannot run generation with a static KV cache" in result.err
    assert "attention = fused" in result.err and "--set[1]:1:17:" in result.err
    dynamic = [
        "--set",
        "infer.attention=flash",
        "--set",
        "infer.kv_cache=dynamic",
        "--set",
        "infer.graphs=false",
    ]
    assert run_cli("check", "specs/beluga-infer.bench", "-t", "h100", *dynamic, cwd=REPO).code == 0


def test_graphs_are_honoured_on_cuda_and_refused_on_the_cpu():
    from transformers import CompileConfig, GenerationConfig

    generate = spec_files("beluga-infer.bench", "h100")["bench.py"]
    assert plan_literal(generate)["infer"]["graphs"] is True
    assert 'mode = "reduce-overhead" if run["graphs"] else "default"' in generate
    assert hasattr(GenerationConfig(), "compile_config")
    assert "mode" in inspect.signature(CompileConfig).parameters
    pipeline = spec_files("sd3-infer.bench", "h100")["bench.py"]
    # graphs: the whole MMDiT under CUDA graphs; regional compilation never under them
    # (tests/test_tiers.py runs prepare_pipeline and records torch.compile's options)
    assert 'pipe.transformer.compile(fullgraph=True, mode="reduce-overhead")' in pipeline
    regional = "for blocks in block_lists(pipe.transformer):\n                compile_blocks(blocks, {})"
    assert regional in pipeline
    import torch

    assert "mode" in inspect.signature(torch.compile).parameters  # Module.compile passes it on
    result = run_cli("check", "specs/sd3-infer.bench", "-t", "cpu", "--set", "infer.graphs=true", cwd=REPO)
    assert result.code == 2 and "cannot run infer.graphs = true" in result.err


def test_gaudi_generation_builds_on_meta_and_never_holds_the_whole_model():
    """S5 on Gaudi: meta build, DeepSpeed AutoTP in bf16 materialising shards on the card,
    scoped all-reduce and HPU graphs as optimum-habana's text generation."""
    from deepspeed.inference.config import DeepSpeedInferenceConfig
    from deepspeed.module_inject import layers

    program = spec_files("beluga-infer.bench", "gaudi2")["bench.py"]
    plan = plan_literal(program)
    assert plan["model"]["meta_init"] is True and plan["parallel"]["tensor"] == 8
    assert "model = deepspeed_tensor_parallel(model, degree, dtype, graphs)" in program
    assert "dtype=dtype," in program and "dtype=model.dtype" not in program
    for name in ("dtype", "tensor_parallel", "enable_cuda_graph", "injection_policy"):
        assert name in DeepSpeedInferenceConfig.model_fields, name
    engine = (Path(layers.__file__).parent.parent / "inference" / "engine.py").read_text()
    assert re.search(r"if is_meta_device:\s+self\.module\.to_empty\(device=device\)", engine)
    assert hasattr(layers, "LinearAllreduce")
    scoped = site("optimum/habana/transformers/models/modeling_all_models.py").read_text()
    assert "class ScopedLinearAllReduce(torch.nn.Module):\n    def __init__(self, mod," in scoped
    assert "ScopedLinearAllReduce(mod=child)" in program
    assert 'wrap = run["graphs"] and not self.graphs_taken' in program


def test_gaudi_training_of_s4_uses_zero3():
    """S4 on Gaudi: DeepSpeed ZeRO-3 through its launcher, as optimum-habana's 70B recipes (FSDP
    on Gaudi: tests/test_gaudi_first_contact.py)."""
    files = spec_files("beluga-train.bench", "gaudi2")
    assert plan_literal(files["bench.py"])["parallel"]["sharding"] == "zero3"
    assert "deepspeed.launcher.runner" in files["launch.sh"]
    fsdp = spec_files("beluga-train.bench", "gaudi2", overrides=["parallel.sharding=fsdp"])["bench.py"]
    assert 'if fused and name == "adamw" and not sharded:' in fsdp  # no FusedAdamW over DTensors


def test_gaudi_pipeline_runs_bf16_weights_without_autocast():
    program = spec_files("sd3-infer.bench", "gaudi2")["bench.py"]
    assert "GaudiConfig(use_torch_autocast=False)" in program
    config = site("optimum/habana/transformers/gaudi_configuration.py").read_text()
    assert 'kwargs.pop("use_torch_autocast"' in config


def test_gaudi_ddp_bucket_is_optimum_habanas_default():
    source = site("optimum/habana/transformers/training_args.py").read_text()
    default = int(re.search(r"ddp_bucket_cap_mb: Optional\[int\] = field\(\s*default=(\d+)", source).group(1))
    program = spec_files("sd3.bench", "gaudi2")["bench.py"]
    assert f'"bucket_cap_mb": {default},' in program and default == 230


def test_what_the_docs_say_of_gaudis_prompt_padding_is_true_of_its_pipeline():
    """docs/programs.md: Gaudi pads the text context to a multiple of 256 bytes / element
    (128 tokens at bf16), 333 -> 384; the FLOPs count the 333."""
    source = site("optimum/habana/diffusers/pipelines/stable_diffusion_3/pipeline_stable_diffusion_3.py")
    text = source.read_text()
    assert "kernel_input_alignment_size = int(256 / prompt_embeds.element_size())" in text
    align = 256 // 2
    assert -(-(77 + 256) // align) * align == 384
    assert "333 -> 384" in (REPO / "docs" / "programs.md").read_text()


@pytest.mark.parametrize(
    "spec, metric, shown",
    [
        ("sd3.bench", None, (None, "images/s")),
        ("beluga-train.bench", None, (None, "tokens/s")),
        (
            "sd3-infer.bench",
            None,
            ({"section": "pipeline", "key": "s_per_image", "unit": "s/image"}, "images/s"),
        ),
        ("beluga-infer.bench", None, (None, "output tokens/s")),
        (
            "beluga-infer.bench",
            "tpot_s",
            ({"section": "generation", "key": "tpot_s", "unit": "s"}, "output tokens/s"),
        ),
    ],
)
def test_every_program_prints_its_headline_metric_in_its_own_unit(spec, metric, shown):
    """The program takes its headline from the plan (catalog/metrics.py's table): a latency's
    section, key and unit, else the job's throughput in the workload's unit."""
    overrides = [f"measure.metric={metric}"] if metric else []
    program = spec_files(spec, "cpu", smoke=True, overrides=overrides)["bench.py"]
    assert "value, unit = headline(metrics)" in program
    plan = plan_literal(program)
    assert (plan["headline"], plan["unit"]) == shown


def test_the_text_plan_shows_parameters_and_flops_per_sample():
    result = run_cli("plan", "specs/sd3.bench", "-t", "h100", cwd=REPO)
    assert "2,028,328,000 parameters; 1.736e+12 training FLOPs per image" in result.out
    infer = run_cli("plan", "specs/beluga-infer.bench", "-t", "h100", cwd=REPO).out
    assert "68,976,648,192 parameters" in infer and "prefill of 128 + 2048 decode steps" in infer
    assert "train_flops" not in infer


@pytest.mark.integration
def test_a_program_on_a_machine_without_its_device_says_what_is_missing(tmp_path):
    """Run here (no GPU, no Gaudi): the CUDA program records a clear error, the Gaudi program
    stops before importing habana_frameworks, each with what to do."""
    import json
    import os
    import subprocess

    one = ["cluster.nodes=1", "cluster.devices_per_node=1", "parallel.data=1"]
    for target in ("h100", "gaudi2"):
        sets = [a for s in one for a in ("--set", s)]
        assert (
            run_cli("compile", "specs/sd3.bench", "-t", target, *sets, "-o", str(tmp_path), cwd=REPO).code
            == 0
        )
    env = dict(os.environ)
    (cuda,) = (tmp_path / "sd3_mmdit_train/h100").glob("batch-16_*")  # named for the --set values too
    proc = subprocess.run(["bash", "launch.sh", "--metrics", "m.json"], cwd=cuda, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode != 0
    error = json.loads((cuda / "m.json").read_text())["error"]
    assert "built for CUDA (h100)" in error["message"] and "finds no CUDA device" in error["message"]
    (gaudi,) = (tmp_path / "sd3_mmdit_train/gaudi2").glob("batch-16_*")
    proc = subprocess.run(
        ["bash", "launch.sh"], cwd=gaudi, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "built for Intel Gaudi (gaudi2), but habana_frameworks is not installed" in proc.stderr


def test_inference_plans_carry_no_training_flops():
    import json

    plans = json.loads(run_cli("plan", "specs/sd3-infer.bench", "-t", "h100", "--json", cwd=REPO).out)[
        "plans"
    ]
    assert plans[0]["cost"]["train_flops_per_sample"] is None
    assert plans[0]["cost"]["forward_flops_per_sample"] > 1e15


def test_generation_reports_decode_as_memory_traffic_against_the_hbm_bandwidth(tmp_path):
    """The program's decode bandwidth: the bytes of the roofline's decode phase, in closed
    form for one device (every weight once per step but the input embedding, of which the
    batch's rows; the KV cache read up to the filled length rounded up to the decode bucket
    and written per token), over TPOT x decode steps, and that over the target's HBM
    bandwidth."""
    import importlib.util

    from census_helpers import llama_params

    sets = ["parallel.tensor=1", "cluster.devices_per_node=1", "cluster.nodes=1"]
    program = tmp_path / "bench.py"
    program.write_text(spec_files("beluga-infer.bench", "h100", overrides=sets)["bench.py"])
    spec = importlib.util.spec_from_file_location("s5_bench", program)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config, run = module.PLAN["model"]["config"], module.PLAN["infer"]
    hidden, layers, heads = config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]
    kv_heads, batch = config["num_key_value_heads"], run["batch"]
    ins, outs, b = run["input_tokens"], run["output_tokens"], 2  # bf16
    params = llama_params(hidden, layers, heads, kv_heads, config["intermediate_size"], config["vocab_size"])
    per_token = 2 * layers * kv_heads * (hidden // heads) * b
    steps, bucket, vocab = outs - 1, run["decode_bucket"], config["vocab_size"]
    assert bucket == 128
    context = sum(min(-(-(ins + j) // bucket) * bucket, ins + outs) for j in range(1, steps + 1))
    weights = b * (params - vocab * hidden + batch * hidden)
    expected = steps * weights + batch * (context + steps) * per_token
    decode = module.PLAN["decode"]
    assert decode["bytes_per_device"] == pytest.approx(expected, rel=1e-9)
    assert decode["hbm_bytes_per_s"] == pytest.approx(3.35e12)  # the h100's HBM
    figures = module.decode_bandwidth(0.01, outs)
    assert figures["decode_bytes_per_s"] == pytest.approx(expected / (0.01 * steps))
    assert figures["decode_hbm_utilisation"] == pytest.approx(expected / (0.01 * steps) / 3.35e12)
    nothing = {"decode_bytes_per_s": None, "decode_hbm_utilisation": None}
    assert module.decode_bandwidth(None, outs) == nothing
    assert module.decode_bandwidth(0.01, 1)["decode_bytes_per_s"] is None  # no decode step
