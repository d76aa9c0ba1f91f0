"""Lowering to typed plans: defaults, presets, derived values, sweeps, overrides, smoke."""

from __future__ import annotations

import json

import pytest

from benchc.diagnostics import BenchError
from benchc.pipeline import plan_spec
from benchc.plan.types import CausalLM, MMDiTModel, SD3Pipeline, TrainWorkload

from helpers import SPECS

BASE = """
experiment e {{
  model mmdit {{ preset = "sd3-medium" }}
  train {{ batch = 16 }}
  cluster {{ nodes = 2; devices_per_node = 8 }}
  targets = [gaudi2, h100]
  {extra}
}}
"""


@pytest.fixture
def plan_text(write):
    def _plan(text: str, **kwargs):
        return plan_spec(write("spec.bench", text), **kwargs).plans

    return _plan


def test_sd3_presets_expand_to_the_published_configs(plan_text):
    (plan, _) = plan_text(BASE.format(extra=""))
    model = plan.model
    assert isinstance(model, MMDiTModel)
    assert (model.depth, model.heads, model.head_dim, model.hidden) == (24, 24, 64, 1536)
    assert (model.joint_attention_dim, model.caption_projection_dim) == (4096, 1536)
    assert (model.pooled_projection_dim, model.pos_embed_max_size, model.qk_norm) == (2048, 192, "none")
    large = plan_text(BASE.format(extra="").replace("sd3-medium", "sd3-large"))[0].model
    assert (large.depth, large.hidden, large.caption_projection_dim, large.qk_norm) == (
        38, 2432, 2432, "rms_norm",
    )  # fmt: skip


def test_derived_image_and_batch_values(plan_text):
    plan = plan_text(BASE.format(extra=""))[0]
    w = plan.workload
    assert isinstance(w, TrainWorkload)
    assert (w.resolution, w.latent_size, w.image_tokens) == (256, 32, 256)
    assert plan.model.text_tokens == 154
    assert plan.cluster.world_size == 16 and plan.parallel.data == 16
    assert (w.micro_batch, w.grad_accum, w.global_batch) == (16, 1, 256)
    assert w.objective == "rectified_flow" and w.optimizer.name == "adamw"


def test_grad_accum_is_derived_from_global_batch(plan_text):
    text = BASE.format(extra="").replace("train { batch = 16 }", "train { batch = 2; global_batch = 128 }")
    w = plan_text(text)[0].workload
    assert (w.micro_batch, w.grad_accum, w.global_batch) == (2, 4, 128)


def test_user_settings_override_presets(plan_text):
    text = BASE.format(extra="").replace('preset = "sd3-medium"', 'preset = "sd3-medium"; depth = 12')
    model = plan_text(text)[0].model
    assert (model.depth, model.heads, model.hidden) == (12, 12, 768)


def test_sweeps_are_a_cartesian_product_per_target(plan_text):
    plans = plan_text(
        BASE.format(extra="sweep train.batch = [16, 32]\n sweep train.precision = [bf16, fp32]")
    )
    assert len(plans) == 2 * 2 * 2
    names = sorted({p.point for p in plans})
    assert names == [
        "batch-16_precision-bf16", "batch-16_precision-fp32",
        "batch-32_precision-bf16", "batch-32_precision-fp32",
    ]  # fmt: skip
    point = next(p for p in plans if p.point == "batch-32_precision-fp32" and p.target.name == "h100")
    assert point.workload.micro_batch == 32 and point.workload.precision == "fp32"
    assert dict(point.point_values) == {"train.batch": 32, "train.precision": "fp32"}


def test_set_overrides_and_replaces_a_sweep(plan_text):
    text = BASE.format(extra="sweep train.batch = [16, 32]")
    plans = plan_text(text, overrides=["train.batch=8", "train.optimizer=sgd(lr = 0.1, momentum = 0.9)"])
    assert len(plans) == 2  # one point per target: the --set replaced the sweep
    assert {p.workload.micro_batch for p in plans} == {8}
    assert plans[0].workload.optimizer.args == {"lr": 0.1, "momentum": 0.9}
    assert plans[0].overrides == ("train.batch=8", "train.optimizer=sgd(lr = 0.1, momentum = 0.9)")
    assert {p.point for p in plans} == {"batch-8_optimizer-sgd"}
    assert dict(plans[0].point_values) == {
        "train.batch": 8, "train.optimizer": {"fn": "sgd", "args": {"lr": 0.1, "momentum": 0.9}},
    }  # fmt: skip


@pytest.mark.parametrize(("extra", "overrides", "point"), [
    ("", ["train.precision=fp32"], "precision-fp32"),  # the spec says nothing: named
    ("", ["train.batch=16"], "default"),  # restates the spec's value
    ("", ["train.batch=4", "train.batch=16"], "default"),  # the last of one key counts
    ("", ["targets=[h100]", "prices.per_device_hour.h100=3.5"], "default"),  # not a point's value
    ("", ['slurm.partition="gpu"'], "default"),  # where the job is queued
    ("", ["optimize=tuned", "runtime=torch"], "default"),  # their defaults
    ("", ["optimize=plain"], "optimize-plain"),
    ("sweep train.batch = [16, 32]", ["train.batch=16"], "batch-16"),  # the sweep's point's name
    ("sweep train.batch = [16, 32]", ["train.precision=fp32"],
     "batch-16_precision-fp32 batch-32_precision-fp32"),
    ("on h100 { train.batch = 8 }", ["train.batch=8"], "batch-8"),  # each target: one name
    ("on gaudi2 { train.precision = bf16 }", ["train.precision=bf16", "optimize=plain"],
     "precision-bf16_optimize-plain"),
    ("sweep train.batch = [16, 32]", ["runtime=accelerate", "train.batch=16"],
     "batch-16_runtime-accelerate"),  # the swept key first, as the sweep names its points
])  # fmt: skip
def test_a_set_that_changes_the_spec_s_value_names_the_point(plan_text, extra, overrides, point):
    """A --set giving another value than the spec's names the point (issue 36, item 5), so a
    bf16 build and the spec's fp32 one are never stored or reported under one name; every
    target's point has the same name, and the values named are the point's values."""
    plans = plan_text(BASE.format(extra=extra), overrides=overrides)
    assert sorted({p.point for p in plans}) == point.split()
    for plan in plans:  # each name part is one of the point's values
        parts = {f"{key.split('.')[-1]}-{value}" for key, value in plan.point_values}
        assert plan.point == "default" if not parts else set(plan.point.split("_")) == parts


def test_set_type_error_is_located_in_the_argument(plan_text):
    with pytest.raises(BenchError) as caught:
        plan_text(BASE.format(extra=""), overrides=["train.steps=fast"])
    (d,) = caught.value.diagnostics
    assert d.span.source.name == "--set[1]" and d.span.column == 13
    assert "train.steps must be a whole number" in d.message


def test_on_target_blocks_apply_to_their_target_only(plan_text):
    text = BASE.format(extra="on gaudi2 { train.precision = fp32; train.batch = 8 }")
    by_target = {p.target.name: p.workload for p in plan_text(text)}
    assert (by_target["gaudi2"].precision, by_target["gaudi2"].micro_batch) == ("fp32", 8)
    assert (by_target["h100"].precision, by_target["h100"].micro_batch) == ("bf16", 16)


def test_on_target_values_are_validated_with_their_location(plan_text):
    with pytest.raises(BenchError) as caught:
        plan_text(BASE.format(extra="on gaudi2 { train.batch = 0 }"))
    (d,) = caught.value.diagnostics
    assert d.message == "on.gaudi2.train.batch must be at least 1, not 0"
    assert d.span.line == 7


def test_references_match_their_point(plan_text):
    extra = (
        "sweep train.batch = [16, 32]\n"
        'reference "g16" { target = gaudi2; value = 927; unit = "images/s"; where { train.batch = 16 } }'
    )
    plans = plan_text(BASE.format(extra=extra))
    found = {(p.target.name, p.point): [r.label for r in p.references] for p in plans}
    assert found[("gaudi2", "batch-16")] == ["g16"]
    assert found[("gaudi2", "batch-32")] == [] and found[("h100", "batch-16")] == []


def test_smoke_shrinks_but_keeps_code_paths(plan_text):
    text = BASE.format(extra="sweep train.batch = [16, 32]").replace(
        "train { batch = 16 }", "train { batch = 16; attention = fused; precision = bf16; grad_accum = 4 }"
    )
    plans = plan_text(text, smoke=True)
    assert {p.target.name for p in plans} == {"cpu"}  # --smoke runs on the cpu by default
    assert [p.workload.micro_batch for p in plans] == [2, 4]  # the sweep stays meaningful
    for plan in plans:
        assert plan.smoke and plan.cluster.world_size == 2 and plan.parallel.data == 2
        assert plan.model.depth == 2 and plan.model.hidden == 64
        w = plan.workload
        assert (w.attention, w.precision, w.objective) == ("fused", "bf16", "rectified_flow")
        assert w.grad_accum == 2 and w.global_batch == w.micro_batch * 2 * 2
        assert w.warmup < w.steps <= 5 and w.latent_size == 16


def test_smoke_keeps_tensor_parallel_and_grouped_query_attention(plan_text):
    text = """
    experiment e {
      model llama { preset = "llama-2-70b" }
      infer { input_tokens = 128; output_tokens = 2048 }
      cluster { devices_per_node = 8 }
      parallel { tensor = 8 }
      targets = [gaudi2]
    }
    """
    (plan,) = plan_text(text, smoke=True)
    assert isinstance(plan.model, CausalLM)
    assert (plan.parallel.tensor, plan.parallel.data, plan.cluster.world_size) == (2, 1, 2)
    assert plan.model.kv_heads < plan.model.heads and plan.model.heads % plan.parallel.tensor == 0
    assert plan.workload.input_tokens + plan.workload.output_tokens <= plan.model.max_positions


def test_plans_serialise_to_json_deterministically(plan_text):
    text = BASE.format(extra="sweep train.batch = [16, 32]")
    first = json.dumps([p.to_dict() for p in plan_text(text)], sort_keys=True)
    second = json.dumps([p.to_dict() for p in plan_text(text)], sort_keys=True)
    assert first == second
    data = json.loads(first)[0]
    assert data["schema_version"] == 1 and data["target"]["peak_tflops"]["bf16"] == 432.0
    assert data["workload"]["measured_steps"] == data["workload"]["steps"] - data["workload"]["warmup"]


def test_plans_are_frozen(plan_text):
    plan = plan_text(BASE.format(extra=""))[0]
    with pytest.raises(AttributeError):
        plan.workload.micro_batch = 1  # type: ignore[misc]


def test_beluga_train_on_gaudi2_is_256_devices_and_global_batch_1024():
    (plan,) = plan_spec(SPECS / "beluga-train.bench", targets=["gaudi2"]).plans
    assert plan.cluster.world_size == 256
    w = plan.workload
    assert (w.micro_batch, w.grad_accum, plan.parallel.data, w.global_batch) == (2, 2, 256, 1024)
    assert w.precision == "bf16"  # the on gaudi2 block: optimum-habana has no fp16
    (cuda,) = plan_spec(SPECS / "beluga-train.bench", targets=["h100"]).plans
    assert cuda.workload.precision == "fp16"


def test_sd3_infer_is_the_whole_pipeline():
    plan = plan_spec(SPECS / "sd3-infer.bench").plans[0]
    assert isinstance(plan.model, SD3Pipeline)
    assert plan.model.transformer.depth == 38
    w = plan.workload
    assert (w.resolution, w.latent_size, w.image_tokens, w.denoising_steps) == (1024, 128, 4096, 30)
    assert w.classifier_free_guidance is True


def test_a_preset_with_another_depth_keeps_the_caption_projection_consistent(plan_text):
    text = BASE.format(extra="").replace('preset = "sd3-medium"', 'preset = "sd3-large"; depth = 12')
    model = plan_text(text)[0].model
    assert model.caption_projection_dim == model.hidden == 768


def test_smoke_keeps_an_accumulation_derived_from_global_batch(plan_text):
    text = BASE.format(extra="").replace("train { batch = 16 }", "train { batch = 16; global_batch = 512 }")
    (full, _) = plan_text(text)
    assert full.workload.grad_accum == 2
    (smoke,) = plan_text(text, targets=["cpu"], smoke=True)
    assert smoke.workload.grad_accum == 2


def test_reference_where_matches_defaults_and_smoke_plans_carry_none(plan_text):
    extra = 'reference "r" { target = h100; value = 1; unit = "images/s"; where { train.precision = bf16 } }'
    plans = plan_text(BASE.format(extra=extra))
    assert [r.label for p in plans if p.target.name == "h100" for r in p.references] == ["r"]
    assert all(not p.references for p in plan_text(BASE.format(extra=extra), targets=["h100"], smoke=True))


def test_an_optimizer_call_without_lr_gets_the_documented_default(plan_text):
    text = BASE.format(extra="").replace("train { batch = 16 }", "train { batch = 16; optimizer = adamw() }")
    assert plan_text(text)[0].workload.optimizer.args == {"lr": 1e-4}


def test_a_set_that_creates_a_block_is_located_in_the_argument(plan_text):
    with pytest.raises(BenchError) as caught:
        plan_text(BASE.format(extra=""), overrides=["x.y=1"])
    (d,) = caught.value.diagnostics
    assert d.span.source.name == "--set[1]" and d.message == "unknown key 'x'"


def test_set_targets_replaces_the_list(plan_text):
    plans = plan_text(BASE.format(extra=""), overrides=["targets=[a100]"])
    assert {p.target.name for p in plans} == {"a100"}
