"""The reference specs S1-S5: present, documented, and expressing the published workloads."""

from __future__ import annotations

import pytest

from benchc.pipeline import plan_spec

from helpers import SPECS

REFERENCE = {
    "sd3.bench": "S1",
    "sd3-scale.bench": "S2",
    "sd3-infer.bench": "S3",
    "beluga-train.bench": "S4",
    "beluga-infer.bench": "S5",
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_spec_has_a_header_naming_its_workload(name):
    first = (SPECS / name).read_text().splitlines()[0]
    assert first.startswith(f"# {REFERENCE[name]} - ")


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_spec_compiles_for_gaudi_and_cuda_and_shrinks_for_cpu(name):
    full = plan_spec(SPECS / name)
    assert {"gaudi2", "h100", "a100"} <= set(full.targets)
    assert any(ref.target == "gaudi2" for p in full.plans for ref in p.references)  # published figure
    smoke = plan_spec(SPECS / name, smoke=True)
    real_world = {p.point: p.cluster.world_size for p in full.plans}
    for plan in smoke.plans:  # 2 processes, or 1 for a one-device benchmark
        assert plan.target.name == "cpu" and plan.cluster.world_size == min(2, real_world[plan.point])


def test_s1_sweeps_batch_16_and_32_on_16_devices():
    plans = plan_spec(SPECS / "sd3.bench", targets=["gaudi2"]).plans
    assert [(p.workload.micro_batch, p.cluster.world_size) for p in plans] == [(16, 16), (32, 16)]
    assert [r.value for p in plans for r in p.references] == [927, 1254]


def test_s2_scales_to_256_devices():
    plans = plan_spec(SPECS / "sd3-scale.bench", targets=["a100"]).plans
    assert [p.cluster.world_size for p in plans] == [16, 32, 64, 128, 256]
    assert [p.parallel.data for p in plans] == [16, 32, 64, 128, 256]
    assert [r.value for r in plans[-1].references] == [3992]


def test_s5_generates_2048_tokens_from_128_with_tensor_parallel():
    (plan,) = plan_spec(SPECS / "beluga-infer.bench", targets=["gaudi2"]).plans
    w = plan.workload
    assert (w.input_tokens, w.output_tokens, plan.parallel.tensor) == (128, 2048, 8)
