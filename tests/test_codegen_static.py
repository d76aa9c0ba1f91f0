"""The CUDA and Gaudi programs, which cannot run here, checked against the real libraries.

See tests/static_checks.py for what the checks prove and what they do not.
"""

from __future__ import annotations

import ast
import inspect
import re
import shutil
from pathlib import Path

import pytest
import torch
from codegen_helpers import s1_files, spec_files
from diffusers import SD3Transformer2DModel
from static_checks import check_program, keyword_names, returned_dict_keys

from benchc.catalog.habana import HABANA_SYMBOLS, OPTIMUM_HABANA
from benchc.codegen.environment import environment
from benchc.codegen.programs import render_program
from benchc.pipeline import plan_spec

from helpers import SPECS

# what a CUDA program asks nvidia-ml-py (the energy over its measured work)
NVML_CALLS = {
    "pynvml.nvmlInit",
    "pynvml.nvmlDeviceGetHandleByUUID",
    "pynvml.nvmlDeviceGetTotalEnergyConsumption",
    "pynvml.nvmlDeviceGetPowerUsage",
}
VARIANTS = [
    ("h100", []),
    ("a100", ["train.attention=xformers"]),
    ("h100", ["train.precision=fp16", "train.grad_clip=1.0", "parallel.sharding=fsdp"]),
    ("gaudi2", []),
    ("gaudi2", ["train.compile=true", "train.grad_clip=1.0", "parallel.activation_checkpointing=true"]),
    ("gaudi3", ["train.attention=sdpa"]),
    ("llama:gaudi2", []),
    ("llama:h100", []),
    ("llama:a100", ["train.attention=eager", "parallel.sharding=none"]),
    ("llama:gaudi2", ["parallel.sharding=zero3"]),
    ("llama:h100", ["parallel.sharding=zero2"]),
    ("generate:gaudi2", []),
    ("generate:h100", []),
    ("generate:a100", ["infer.compile=true", "infer.graphs=false"]),
    ("pipeline:gaudi2", []),
    ("pipeline:h100", ["infer.compile=true"]),
]


def _program(target, overrides):
    if target.startswith("pipeline:"):
        return spec_files("sd3-infer.bench", target.split(":")[1], overrides=overrides)["bench.py"]
    if target.startswith("generate:"):
        return spec_files("beluga-infer.bench", target.split(":")[1], overrides=overrides)["bench.py"]
    if target.startswith("llama:"):
        return spec_files("beluga-train.bench", target.split(":")[1], overrides=overrides)["bench.py"]
    return s1_files(target, overrides=overrides)["bench.py"]


@pytest.mark.parametrize("target, overrides", VARIANTS)
def test_calls_bind_to_the_installed_libraries(target, overrides):
    report = check_program(_program(target, overrides))
    assert report.problems == []
    checked = set(report.checked)
    if "gaudi" not in target:  # every CUDA program reads its GPU's energy through NVML
        assert NVML_CALLS <= checked, sorted(NVML_CALLS - checked)
    if target.startswith("pipeline:"):
        must = {
            "diffusers.SD3Transformer2DModel",
            "diffusers.AutoencoderKL",
            "diffusers.FlowMatchEulerDiscreteScheduler",
            "transformers.T5EncoderModel",
            "transformers.CLIPTextModelWithProjection",
        }
        if "gaudi" in target:
            must.add("optimum.habana.transformers.gaudi_configuration.GaudiConfig")
        assert must <= checked
        return
    if target.startswith("generate:"):
        must = {
            "transformers.AutoModelForCausalLM.from_config",
            "transformers.AutoConfig.for_model",
            "torch.distributed.tensor.parallel.parallelize_module",
            "torch.distributed.device_mesh.init_device_mesh",
        }
        if "gaudi" in target:
            must |= {"deepspeed.init_inference",
                     "optimum.habana.transformers.modeling_utils.adapt_transformers_to_gaudi"}  # fmt: skip
        assert must <= checked
        return
    must = {
        "torch.autocast",
        "torch.distributed.init_process_group",
        "torch.nn.parallel.DistributedDataParallel",
    }
    llama = target.startswith("llama:")
    if llama:
        must |= {"transformers.AutoModelForCausalLM.from_config", "transformers.AutoConfig.for_model"}
        if any("zero" in o for o in overrides):
            must.add("deepspeed.initialize")
            must -= {"torch.nn.parallel.DistributedDataParallel"}
            if "zero3" in str(overrides):
                must.add("deepspeed.zero.Init")
        else:
            must.add("torch.distributed.fsdp.fully_shard")
    else:
        must |= {"diffusers.SD3Transformer2DModel", "torch.nn.functional.mse_loss"}
    if "gaudi" in target:
        must.add(
            "optimum.habana.transformers.modeling_utils.adapt_transformers_to_gaudi"
            if llama
            else "optimum.habana.diffusers.models.attention_processor.GaudiJointAttnProcessor2_0"
        )
    else:
        must |= {"torch.cuda.synchronize", "torch.nn.attention.sdpa_kernel"}
    assert must <= checked


@pytest.mark.parametrize("target, overrides", VARIANTS)
def test_keyword_arguments_passed_through_tables_and_dicts_exist(target, overrides):
    program = _program(target, overrides)
    if target.startswith(("generate:", "pipeline:")):
        return  # test_generation_options_exist and test_pipeline_classes cover these
    namespace: dict = {}
    plan_literal = re.search(r"^PLAN = (\{.*?^\})$", program, flags=re.M | re.S).group(1)
    exec(compile(f"PLAN = {plan_literal}", "<plan>", "exec"), namespace)  # a literal only
    config = namespace["PLAN"]["model"]["config"]
    if target.startswith("llama:"):
        from transformers import AutoConfig, LlamaConfig

        model_type = namespace["PLAN"]["model"]["model_type"]
        built = AutoConfig.for_model(model_type, **config)  # every key must land as an attribute
        assert type(built) is LlamaConfig
        assert built.num_key_value_heads == config["num_key_value_heads"]
        assert built._attn_implementation == config["attn_implementation"]
        assert set(config) - {"attn_implementation"} <= set(
            inspect.signature(LlamaConfig.__init__).parameters
        )
    else:
        model_parameters = inspect.signature(SD3Transformer2DModel.__init__).parameters
        assert set(config) <= set(model_parameters)
    ddp_parameters = inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters
    assert returned_dict_keys(program, "ddp_options") <= set(ddp_parameters)
    for name, optimizer in {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}.items():
        optimizer_parameters = inspect.signature(optimizer.__init__).parameters
        assert keyword_names(program, "optimizer", "TORCH_OPTIMIZERS[name]") <= set(optimizer_parameters), (
            name
        )
    args = namespace["PLAN"]["train"]["optimizer"]["args"]
    assert set(args) <= set(inspect.signature(torch.optim.AdamW.__init__).parameters)


@pytest.mark.integration
def test_habana_symbols_are_exactly_the_allow_list():
    used = set()
    for target, overrides in VARIANTS:
        if "gaudi" in target:
            used |= check_program(_program(target, overrides)).habana_symbols
    for target, overrides in VARIANTS:
        if "gaudi" not in target:
            assert not check_program(_program(target, overrides)).habana_symbols
    assert used == set(HABANA_SYMBOLS)


def test_allow_list_references_are_true_of_optimum_habana():
    import importlib.util

    root = Path(next(iter(importlib.util.find_spec("optimum").submodule_search_locations))).parent
    checked = 0
    for symbol, reference in HABANA_SYMBOLS.items():
        if not reference.startswith(OPTIMUM_HABANA):
            continue
        path = re.search(r"(optimum/habana/\S+\.py)", reference).group(1)
        assert symbol.rsplit(".", 1)[-1] in (root / path).read_text(), (symbol, path)
        checked += 1
    assert checked >= 5


def test_a_misspelled_keyword_in_a_template_is_caught(tmp_path):
    """The checks can fail: a template with misspelled keyword arguments is rejected."""
    broken = tmp_path / "templates"
    shutil.copytree(Path(environment().loader.searchpath[0]), broken)
    cuda = broken / "adapter_cuda.py.j2"
    cuda.write_text(cuda.read_text().replace('device_type="cuda"', 'device_typ="cuda"'))
    hpu = broken / "adapter_hpu.py.j2"
    hpu.write_text(hpu.read_text().replace("is_training=training", "is_trainig=training"))
    core = broken / "model_mmdit.py.j2"
    core.write_text(core.read_text().replace("torch.randn_like(latents)", "torch.randn_alike(latents)"))

    env = environment(str(broken))
    for target, misspelt in [("h100", "device_typ"), ("gaudi2", "is_trainig"), ("cpu", "randn_alike")]:
        (plan,) = plan_spec(SPECS / "sd3.bench", targets=[target], overrides=["train.batch=16"]).plans
        report = check_program(render_program(plan, env))
        assert any(misspelt in p for p in report.problems), (target, report.problems)
        ast.parse(render_program(plan, env))  # still valid Python: only the checks catch it


def test_gaudi_llama_forward_options_exist_in_optimum_habana():
    """The keyword arguments the Gaudi adapter passes to the Llama forward are real ones."""
    from static_checks import _source_signature, returned_dict_keys

    program = _program("llama:gaudi2", [])
    options = returned_dict_keys(program, "forward_options")
    assert options == {"use_flash_attention", "flash_attention_recompute", "flash_attention_causal_mask"}
    forward = _source_signature(
        "optimum.habana.transformers.models.llama.modeling_llama.GaudiLlamaForCausalLM.forward"
    )
    assert options <= set(forward.parameters)


@pytest.mark.parametrize("target", ["gaudi2", "h100"])
def test_generation_options_exist(target):
    """generate() options and DeepSpeed inference settings are real names in the installed
    transformers / optimum-habana (source) / DeepSpeed."""
    from deepspeed.inference.config import DeepSpeedInferenceConfig
    from static_checks import _source_signature, returned_dict_keys
    from transformers import GenerationConfig

    program = _program(f"generate:{target}", [])
    options = returned_dict_keys(program, "generate_options")
    if target == "gaudi2":
        generate = _source_signature(
            "optimum.habana.transformers.generation.utils.GaudiGenerationMixin.generate"
        )
        config_source = (
            Path(importlib_path("optimum")) / "habana/transformers/generation/configuration_utils.py"
        ).read_text()
        gaudi_fields = set(re.findall(r"self\.(\w+) = kwargs\.get", config_source))
        assert options <= set(generate.parameters) | gaudi_fields
        assert {"static_shapes", "bucket_size", "ignore_eos", "hpu_graphs"} <= options
        for name in ("dtype", "tensor_parallel", "injection_policy"):
            assert name in DeepSpeedInferenceConfig.model_fields
        assert 'options["injection_policy"] = {layer: ("self_attn.o_proj", "mlp.down_proj")}' in program
        assert "layer = type(transformer_blocks(model)[0])" in program
    else:
        assert options == {"cache_implementation", "disable_compile", "compile_config"}
        assert all(hasattr(GenerationConfig(), name) for name in options)
        from transformers import CompileConfig

        assert CompileConfig(mode="reduce-overhead").mode == "reduce-overhead"  # graphs
        assert "compile_config.mode" not in program and "CompileConfig(mode=mode)" in program


def importlib_path(package: str) -> str:
    import importlib.util

    return next(iter(importlib.util.find_spec(package).submodule_search_locations))


@pytest.mark.parametrize("target", ["gaudi2", "h100"])
def test_pipeline_classes_and_options_exist(target):
    """The SD3 pipeline each target builds takes the components and options given to it; the
    component configs are real keyword arguments of the real config classes."""
    from diffusers import AutoencoderKL, StableDiffusion3Pipeline
    from static_checks import _source_signature
    from transformers import CLIPTextConfig, T5Config

    from benchc.catalog.sd3_components import FULL, SMOKE

    components = {"transformer", "scheduler", "vae", "text_encoder", "tokenizer", "text_encoder_2",
                  "tokenizer_2", "text_encoder_3", "tokenizer_3"}  # fmt: skip
    program = _program(f"pipeline:{target}", [])
    options = returned_dict_keys(program, "pipeline_options")
    if target == "gaudi2":
        signature = _source_signature(
            "optimum.habana.diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3."
            "GaudiStableDiffusion3Pipeline"
        )
        assert options == {"use_habana", "use_hpu_graphs", "gaudi_config", "sdp_on_bf16"}
        config_source = (
            Path(importlib_path("optimum")) / "habana/transformers/gaudi_configuration.py"
        ).read_text()
        assert 'kwargs.pop("use_torch_autocast"' in config_source
    else:
        signature = inspect.signature(StableDiffusion3Pipeline.__init__)
        assert options == set()
    assert components | options <= set(signature.parameters)
    call = inspect.signature(StableDiffusion3Pipeline.__call__).parameters
    for name in ("prompt_embeds", "pooled_prompt_embeds", "negative_prompt_embeds",
                 "negative_pooled_prompt_embeds", "num_inference_steps", "guidance_scale",
                 "callback_on_step_end", "output_type", "height", "width"):  # fmt: skip
        assert name in call
    for parts in (FULL, SMOKE):
        assert set(parts["clip_l"]) <= set(CLIPTextConfig().to_dict()) | {"hidden_act"}
        assert set(parts["t5"]) <= set(T5Config().to_dict())
        assert set(parts["vae"]) <= set(inspect.signature(AutoencoderKL.__init__).parameters)
