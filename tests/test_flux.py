"""`model flux`: diffusers' Flux transformer, trained with rectified flow on packed latents, and
the whole FluxPipeline for inference, counted from the model itself.

Tiny configs, real diffusers models: the plan's parameters equal the model's own count, its
forward FLOPs torch's FLOP counter. Presets: the published parameter counts, counted afresh on
the meta device, and the shipped table equal to a fresh count. The located refusals of check;
the CPU runs of both programs; the Gaudi and CUDA programs bound to the installed libraries.
"""

from __future__ import annotations

import inspect
import json

import pytest
import torch

from benchc.catalog.flux import PRESETS, PUBLISHED_PARAMS
from benchc.codegen.points import render_point
from benchc.diagnostics import BenchError
from benchc.pipeline import plan_spec
from benchc.plan.census import _shipped_flux, canonical, count_flux_afresh
from benchc.plan.census_table import flux_preset_configs

from helpers import point_in, run_cli

SHAPE = (
    "depth = 2; single_depth = 2; heads = 2; head_dim = 32; joint_attention_dim = 64; "
    "pooled_projection_dim = 32; text_tokens = 16"
)
TRAIN = (
    "train { precision = fp32; batch = 2; resolution = 128; steps = 3; warmup = 1; "
    "optimizer = sgd(lr = 0.01) }"
)
INFER = "infer { precision = fp32; batch = 1; resolution = 128; denoising_steps = 2; steps = 3; warmup = 1 }"


def flux_spec(write, work: str = TRAIN, model: str = SHAPE, targets: str = "cpu", extra: str = ""):
    text = f"experiment fx {{\n  model flux {{ {model} }}\n  {work}\n  targets = [{targets}]\n{extra}}}\n"
    return write("fx.bench", text)


def plan_of(path, *overrides, targets=()):
    (plan,) = plan_spec(path, list(targets), list(overrides)).plans
    return plan


def reference_model(plan):
    from diffusers import FluxTransformer2DModel

    return FluxTransformer2DModel(**json.loads(plan.model.config))


# ------------------------------------------------------------------ counted from the model


@pytest.mark.parametrize("guidance", [True, False])
def test_a_flux_transformer_counts_as_diffusers_builds_it(write, guidance):
    """Parameters equal the model's own; a forward's FLOPs (64 image and 16 text tokens) are
    within 1% of torch's counter, attention by SDPA's math kernel (matrix products the counter
    sees; its fused CPU kernel is not counted) (the norms, rotary embedding and modulations'
    elementwise work is what differs)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    plan = plan_of(flux_spec(write, model=f"{SHAPE}; guidance = {str(guidance).lower()}"))
    torch.manual_seed(0)
    model = reference_model(plan).eval()
    assert plan.cost.params == sum(p.numel() for p in model.parameters())
    image, text = plan.workload.image_tokens, plan.model.text_tokens
    assert (image, text) == (64, 16)  # 128 px / 8 (VAE) / 2 (packing), squared
    inputs = {
        "hidden_states": torch.randn(1, image, 64), "encoder_hidden_states": torch.randn(1, text, 64),
        "pooled_projections": torch.randn(1, 32), "timestep": torch.ones(1),
        "img_ids": torch.zeros(image, 3), "txt_ids": torch.zeros(text, 3),
        "guidance": torch.ones(1) if guidance else None,
    }  # fmt: skip
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(**inputs)
    assert plan.cost.forward_flops_per_sample == pytest.approx(counter.get_total_flops(), rel=0.01)
    assert plan.cost.train_flops_per_sample == 3 * plan.cost.forward_flops_per_sample
    census = plan.model.census
    assert census.double_layers == 2 and census.single_layers == 2
    assert set(census.block_classes) == {"FluxTransformerBlock", "FluxSingleTransformerBlock"}
    assert census.double_block == sum(p.numel() for p in model.transformer_blocks[0].parameters())


def test_inference_flops_are_one_transformer_pass_per_denoising_step(write):
    """Flux's guidance is embedded: one pass per step, never two (no classifier-free guidance)."""
    train = plan_of(flux_spec(write))
    infer = plan_of(flux_spec(write, INFER.replace("batch = 1", "batch = 1; guidance = 3.5")))
    assert infer.workload.classifier_free_guidance is False
    assert infer.cost.forward_flops_per_sample == 2 * train.cost.forward_flops_per_sample


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_have_their_published_parameter_counts(preset):
    """Counted afresh on the meta device: FLUX.1 [dev] and [schnell] as Black Forest Labs
    publish them (11.9B; schnell has no guidance embedder)."""
    from benchc.catalog.flux import transformer_config
    from benchc.plan.lower import MODEL_DEFAULTS

    config = transformer_config({**MODEL_DEFAULTS["flux"], **PRESETS[preset]})
    (answer,) = count_flux_afresh([config])
    assert answer["params"] == PUBLISHED_PARAMS[preset]


def test_the_shipped_table_is_a_fresh_count():
    configs = flux_preset_configs()
    assert {canonical(c) for c in configs} == set(_shipped_flux())
    for config, answer in zip(configs, count_flux_afresh(configs), strict=True):
        assert _shipped_flux()[canonical(config)] == answer


def test_a_preset_gives_its_shape_and_the_spec_overrides_it(write):
    plan = plan_of(flux_spec(write, model='preset = "flux.1-schnell"; single_depth = 4'))
    m = plan.model
    assert (m.preset, m.depth, m.single_depth, m.heads, m.head_dim, m.guidance, m.text_tokens) == (
        "flux.1-schnell", 19, 4, 24, 128, False, 256)  # fmt: skip


# ------------------------------------------------------------------ what check refuses


@pytest.mark.parametrize("model, work, extra, message, at", [
    (SHAPE.replace("head_dim = 32", "head_dim = 48"), TRAIN, "",
     "model.flux.head_dim = 48 is not a multiple of 32", "48"),
    (SHAPE.replace("text_tokens = 16", "text_tokens = 600"), TRAIN, "",
     "model.flux.text_tokens = 600 is more than Flux's 512", "600"),
    (f"{SHAPE}; guidance = false", INFER.replace("batch = 1", "batch = 1; guidance = 3.5"), "",
     "infer.guidance does not apply", "guidance = 3.5"),
    (SHAPE, TRAIN.replace("fp32", "fp32; attention = xformers"), "",
     "xformers attention is generated for MMDiT only", "xformers"),
    (SHAPE, INFER, "  cluster { devices_per_node = 2 }\n", "the Flux pipeline benchmark runs on one device",
     "2 }"),
    ("depth = 2; heads = 2", TRAIN, "", "model flux needs single_depth", "flux {"),
    (SHAPE, TRAIN.replace("fp32", "fp32; seq_len = 64"), "", "train.seq_len does not apply to model flux",
     "seq_len"),
])  # fmt: skip
def test_check_refuses_what_flux_cannot_run_at_the_setting(write, model, work, extra, message, at):
    path = flux_spec(write, work, model, extra=extra)
    result = run_cli("check", str(path))
    assert result.code == 2 and "Traceback" not in result.err, result.err
    line, column = next((n, text.index(at) + 1) for n, text in enumerate(path.read_text().splitlines(), 1)
                        if at in text)  # fmt: skip
    located = [d for d in result.err.split("error: ")[1:] if message in d]
    assert located, result.err
    assert f"fx.bench:{line}:{column}: error: {message}" in result.err


def test_gaudi_pipeline_runs_fused_attention_only(write):
    """optimum-habana's GaudiFluxPipeline sets its FusedSDPA processor on every block: any
    other kernel would be recorded but not run."""
    path = flux_spec(write, INFER.replace("fp32", "bf16"), targets="gaudi2")
    with pytest.raises(BenchError) as refused:
        plan_spec(path, [], [])
    assert "always runs FusedSDPA" in str(refused.value.diagnostics[0].message)
    assert plan_of(path, "infer.attention=fused").model.kind == "flux_pipeline"


# ------------------------------------------------------------------ programs


@pytest.mark.parametrize("work", ["train", "infer"])
def test_each_target_s_program_binds_to_the_installed_libraries(write, work):
    """cuda and gaudi programs, which cannot run here: every call bound to the installed
    libraries (optimum-habana's from its source), habana symbols on the allow-list."""
    from static_checks import check_program

    from benchc.catalog.habana import HABANA_SYMBOLS

    body = (TRAIN if work == "train" else INFER).replace(
        "precision = fp32", "precision = bf16; attention = fused"
    )
    for target in ("h100", "gaudi2"):
        plan = plan_of(flux_spec(write, body, targets=target))
        program = render_point(plan)["bench.py"]
        report = check_program(program)
        assert report.problems == [], target
        assert report.habana_symbols <= set(HABANA_SYMBOLS)
        pipeline = {"h100": "FluxPipeline", "gaudi2": "GaudiFluxPipeline"}[target]
        assert (f"return {pipeline}\n" in program) == (work == "infer")


def test_the_pipeline_classes_take_the_components_and_options_given():
    """FluxPipeline and optimum-habana's GaudiFluxPipeline (its source) take the components and
    options the programs give them; the parts' configs are real keyword arguments."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline
    from static_checks import _source_signature, returned_dict_keys
    from transformers import CLIPTextConfig, T5Config

    from benchc.catalog.flux import FULL_PARTS, SCHEDULERS, SMOKE_PARTS

    components = {
        "transformer",
        "scheduler",
        "vae",
        "text_encoder",
        "tokenizer",
        "text_encoder_2",
        "tokenizer_2",
    }
    gaudi = _source_signature("optimum.habana.diffusers.pipelines.flux.pipeline_flux.GaudiFluxPipeline")
    assert components | {"use_habana", "use_hpu_graphs", "gaudi_config", "sdp_on_bf16"} <= set(
        gaudi.parameters
    )
    assert components <= set(inspect.signature(FluxPipeline.__init__).parameters)
    call = _source_signature(
        "optimum.habana.diffusers.pipelines.flux.pipeline_flux.GaudiFluxPipeline.__call__"
    )
    for name in ("prompt", "height", "width", "num_inference_steps", "guidance_scale", "output_type",
                 "callback_on_step_end", "max_sequence_length", "batch_size"):  # fmt: skip
        assert name in call.parameters
        assert name == "batch_size" or name in inspect.signature(FluxPipeline.__call__).parameters
    for parts in (FULL_PARTS, SMOKE_PARTS):
        assert set(parts["clip_l"]) <= set(CLIPTextConfig().to_dict()) | {"hidden_act"}
        assert set(parts["t5"]) <= set(T5Config().to_dict())
        assert set(parts["vae"]) <= set(inspect.signature(AutoencoderKL.__init__).parameters)
    for config in SCHEDULERS.values():
        FlowMatchEulerDiscreteScheduler(**config)  # every key taken
    program = render_point(plan_spec("specs/flux-infer.bench", ["gaudi2"], []).plans[0])["bench.py"]
    assert returned_dict_keys(program, "pipeline_options") == {"use_habana", "use_hpu_graphs", "gaudi_config",
                                                               "sdp_on_bf16"}  # fmt: skip


def test_gaudi_s_flux_processor_reads_only_what_diffusers_flux_attention_has():
    """GaudiFluxAttnProcessor2_0 (the training program's fused kernel, and the pipeline's) was
    adapted from an older diffusers: every attribute it reads of the attention module exists
    on the installed diffusers' Flux attention, in both kinds of block."""
    import ast
    import re
    from importlib.util import find_spec
    from pathlib import Path

    from diffusers import FluxTransformer2DModel

    root = Path(find_spec("optimum.habana").submodule_search_locations[0])
    source = (root / "diffusers/models/attention_processor.py").read_text()
    tree = ast.parse(source)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GaudiFluxAttnProcessor2_0"]
    read = set(re.findall(r"\battn\.(\w+)", ast.get_source_segment(source, cls)))
    model = FluxTransformer2DModel(num_layers=1, num_single_layers=1, attention_head_dim=32,
                                   num_attention_heads=2, joint_attention_dim=64, pooled_projection_dim=32,
                                   axes_dims_rope=[4, 14, 14])  # fmt: skip
    double, single = model.transformer_blocks[0].attn, model.single_transformer_blocks[0].attn
    assert read and all(hasattr(double, name) for name in read), read
    # a single-stream block's attention has no text side and no out projection (pre_only): the
    # processor reads those only when given encoder_hidden_states, which that block never passes
    pre_only = {
        "add_q_proj",
        "add_k_proj",
        "add_v_proj",
        "norm_added_q",
        "norm_added_k",
        "to_add_out",
        "to_out",
    }
    assert all(hasattr(single, name) for name in read - pre_only)
    assert "if encoder_hidden_states is not None" in ast.get_source_segment(source, cls)


# ------------------------------------------------------------------ weights folders


def _run_loading(path, cwd):
    """`benchc run` of a spec whose weights a full run loads; the loaded program's module."""
    import subprocess
    import sys

    from program_helpers import load_program

    result = subprocess.run([sys.executable, "-m", "benchc", "run", str(path), "-o", "build", "--db", "r.db"],
                            cwd=cwd, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (metrics,) = cwd.glob("build/**/runs/*/metrics.json")
    record = json.loads(metrics.read_text())
    assert record["status"] == "ok" and record["weights"]["loaded"] is True
    (program,) = cwd.glob("build/**/bench.py")
    return load_program(program)


@pytest.fixture(scope="module")
def flux_pipeline_folder(tmp_path_factory):
    """The smoke Flux pipeline, saved whole by FluxPipeline.save_pretrained."""
    from checkpoint_helpers import flux_pipeline_checkpoint
    from program_helpers import compile_point, load_program

    root = tmp_path_factory.mktemp("flux")
    point = compile_point(root / "build", "flux-infer.bench")
    return flux_pipeline_checkpoint(root / "pipeline", load_program(point / "bench.py"))


def test_a_transformer_folder_gives_the_shape_and_a_mismatch_is_refused_at_weights(write, tmp_path):
    from checkpoint_helpers import flux_checkpoint

    folder = flux_checkpoint(tmp_path / "t")
    plan = plan_of(flux_spec(write, model=f'weights = "{folder}"'))
    m = plan.model
    assert (m.depth, m.single_depth, m.heads, m.head_dim, m.guidance) == (1, 2, 2, 32, True)
    assert m.weights == str(folder) and plan.cost.params == m.census.params
    # the spec saying otherwise than the folder; inference from a transformer alone; tensors of
    # another model under this config
    result = run_cli("check", str(flux_spec(write, model=f'weights = "{folder}"; depth = 3')))
    assert result.code == 2 and "the spec sets depth = 3, but the checkpoint's config gives 1" in result.err
    result = run_cli("check", str(flux_spec(write, INFER, model=f'weights = "{folder}"')))
    assert result.code == 2 and "inference runs the whole Flux pipeline" in result.err
    other = flux_checkpoint(tmp_path / "other", num_single_layers=3)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "num_single_layers": 2}))
    result = run_cli("check", str(flux_spec(write, model=f'weights = "{other}"')))
    assert result.code == 2 and "do not match the model its config.json describes" in result.err
    assert "single_transformer_blocks.2" in result.err
    (other / "config.json").write_text(json.dumps({**config, "in_channels": 16}))
    result = run_cli("check", str(flux_spec(write, model=f'weights = "{other}"')))
    assert result.code == 2 and "in_channels = 16; benchc builds every Flux transformer" in result.err


@pytest.mark.integration
def test_a_pipeline_folder_is_checked_part_by_part_and_a_full_run_loads_it(flux_pipeline_folder, write,
                                                                           tmp_path):  # fmt: skip
    from checkpoint_helpers import MARKER

    folder = flux_pipeline_folder
    infer = plan_of(flux_spec(write, INFER, model=f'weights = "{folder}"'))
    config = json.loads((folder / "transformer" / "config.json").read_text())
    assert infer.model.transformer.depth == config["num_layers"] and infer.model.weights == str(folder)
    train = plan_of(flux_spec(write, model=f'weights = "{folder}"'))  # training reads its transformer
    assert train.model.weights == str(folder / "transformer")
    module = _run_loading(flux_spec(write, INFER, model=f'weights = "{folder}"'), tmp_path)
    pipe = module.build_pipeline(module.PLAN["model"], module.FluxPipeline, {}, {}, torch.float32,
                                 torch.device("cpu"))  # fmt: skip
    assert pipe.transformer.proj_out.bias[0].item() == MARKER


# ------------------------------------------------------------------ memory


def _saved_bytes(block, image: int, text: int, dtype, autocast: bool) -> int:
    """Bytes of the tensors one block's forward saves for its backward (torch's saved-tensor
    hooks; each storage once), its parameters, inputs and the rotary tables left out."""
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed

    h = block.norm.linear.in_features if hasattr(block, "norm") else block.norm1.linear.in_features
    rope = FluxPosEmbed(theta=10000, axes_dim=[4, 14, 14])(torch.zeros(image + text, 3))
    x = torch.randn(1, image, h, dtype=dtype, requires_grad=True)
    c = torch.randn(1, text, h, dtype=dtype, requires_grad=True)
    temb = torch.randn(1, h, dtype=dtype, requires_grad=True)
    skip = {t.untyped_storage().data_ptr() for t in (*block.parameters(), *rope, x, c, temb)}
    seen = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in skip:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    cast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast)
    with cast, torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        block(hidden_states=x, encoder_hidden_states=c, temb=temb, image_rotary_emb=rope)
    return sum(seen.values())


@pytest.mark.parametrize("autocast", [False, True])
def test_the_per_token_activations_are_what_the_blocks_save(autocast):
    """plan/memory/flux.py's bytes per token of each kind of block, against what the real
    block saves for its backward (the growth from 80 to 160 tokens, so per-sample tensors
    cancel): bf16 weights without autocast (FSDP2's), fp32 weights under bf16 autocast."""
    from diffusers.models.transformers.transformer_flux import (
        FluxSingleTransformerBlock,
        FluxTransformerBlock,
    )

    from benchc.plan.memory.flux import double_block, single_block

    torch.manual_seed(0)
    h, heads = 64, 2
    dtype = torch.float32 if autocast else torch.bfloat16
    b, n = 2, (4 if autocast else 2)
    for block, formula in ((FluxTransformerBlock(h, heads, 32), double_block),
                           (FluxSingleTransformerBlock(h, heads, 32), single_block)):  # fmt: skip
        block = block.to(dtype)
        grown = _saved_bytes(block, 128, 32, dtype, autocast) - _saved_bytes(block, 64, 16, dtype, autocast)
        measured = grown / 80
        estimated = formula(b, n, n, h, heads, 80, False)["full"]
        assert measured <= estimated * 1.01 and estimated <= measured * 1.05, (type(block).__name__, measured)


def test_programs_with_a_weights_folder_load_local_files_only_and_are_lint_clean(write, tmp_path):
    """Flux's programs with a transformer folder (training) on every target, full and smoke:
    every from_pretrained and load_config passes local_files_only=True, the tensors are read
    from the folder's safetensors files by the program itself; formatted, lint clean."""
    import ast
    import subprocess
    import sys

    from checkpoint_helpers import flux_checkpoint

    folder = flux_checkpoint(tmp_path / "t")
    programs = []
    for target in ("cpu", "h100", "gaudi2"):
        for smoke in (False, True):
            work = TRAIN.replace("fp32", "bf16; attention = fused") if target != "cpu" else TRAIN
            (plan,) = plan_spec(flux_spec(write, work, f'weights = "{folder}"', target), [], [],
                                smoke=smoke).plans  # fmt: skip
            path = tmp_path / f"{target}-{smoke}.py"
            path.write_text(render_point(plan)["bench.py"])
            programs.append(path)
    for program in programs:
        loads = ("from_pretrained", "load_config")
        calls = [n for n in ast.walk(ast.parse(program.read_text())) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr in loads]  # fmt: skip
        assert calls and all(any(k.arg == "local_files_only" for k in c.keywords) for c in calls)
        full = "-False" in program.name  # a smoke run checks the folder, runs random weights
        assert ("weights = WeightFiles(folder)" in program.read_text()) == full  # read by benchc
    ruff = [sys.executable, "-m", "ruff"]
    names = [str(p) for p in programs]
    assert (
        subprocess.run([*ruff, "format", "--isolated", "--check", *names], capture_output=True).returncode
        == 0
    )
    assert subprocess.run([*ruff, "check", "--isolated", "--select", "E,F,W,I,B", "--ignore", "E501", *names],
                          capture_output=True).returncode == 0  # fmt: skip


@pytest.mark.integration
def test_fsdp2_and_zero3_ranks_each_read_only_their_part_of_a_sharded_transformer(write, tmp_path):
    """A Flux transformer saved in several safetensors shards: one process's full run loads it
    (the marker weight seen), and trained on 2 CPU ranks, built on
    the meta device, each rank reads at most 0.6 of the checkpoint's bytes (counted by wrapping
    safetensors' reader, tests/readcount/) under FSDP2 (its shards, by slice) and ZeRO-3 (the
    rows of its partitions), and ZeRO-3's first loss is one process's from the same weights."""
    import os
    import sys

    from checkpoint_helpers import FLUX, MARKER
    from diffusers import FluxTransformer2DModel
    from program_helpers import load_program, model_from_local_weights
    from test_run_cpu import launch_nodes

    from helpers import REPO

    torch.manual_seed(0)
    model = FluxTransformer2DModel(**{**FLUX, "num_layers": 2, "num_single_layers": 4})
    with torch.no_grad():
        model.proj_out.bias[0] = MARKER
    model.save_pretrained(tmp_path / "w", max_shard_size="100KB")
    assert len(list((tmp_path / "w").glob("diffusion_pytorch_model-*.safetensors"))) > 2
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    path = flux_spec(write, model=f'weights = "{tmp_path / "w"}"')

    def run(out: str, *sets: str) -> tuple[dict, list]:
        args = [a for s in sets for a in ("--set", s)]
        assert run_cli("compile", str(path), "-o", str(tmp_path / out), *args).code == 0
        env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(REPO / "tests" / "readcount"),
               "BENCHC_TEST_READCOUNT": str(tmp_path / f"{out}-read")}  # fmt: skip
        if not sets:  # one process: no launcher names its rank for the counter
            env.update(RANK="0", WORLD_SIZE="1")
        point = point_in(tmp_path / out / "fx/cpu")
        proc = launch_nodes(point, env, warm=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        reads = [json.loads(p.read_text()) for p in sorted(tmp_path.glob(f"{out}-read.*.json"))]
        return json.loads((point / "metrics.json").read_text()), reads

    alone, _ = run("one")  # a full run: each tensor read onto the device
    assert alone["weights"]["loaded"] is True
    module = load_program(tmp_path / "one/fx/cpu/default/bench.py")
    assert model_from_local_weights(module).proj_out.bias[0].item() == MARKER
    fsdp, reads = run("fsdp", "cluster.devices_per_node=2", "parallel.sharding=fsdp")
    assert fsdp["status"] == "ok" and fsdp["runtime_detail"]["wrapper"].startswith("FSDP")
    assert len(reads) == 2 and all(0 < r["bytes"] <= 0.6 * total for r in reads), (reads, total)
    zero3, reads = run("zero3", "cluster.devices_per_node=2", "parallel.sharding=zero3")
    assert zero3["status"] == "ok" and len(reads) == 2
    assert all(0 < r["bytes"] <= 0.6 * total for r in reads), (reads, total)
    assert zero3["loss"]["all"][0] == pytest.approx(alone["loss"]["all"][0], rel=1e-5)
