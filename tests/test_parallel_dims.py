"""plan.dims (plan/parallel.py): the parallel layout derived once, on the plan, and the one small
launch.sh template per launcher kind that reads it (codegen/launchers.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from codegen_helpers import in_repo

from benchc.codegen.launchers import LAUNCHER_KINDS, launcher_kind, launcher_template
from benchc.diagnostics import BenchError
from benchc.pipeline import plan_spec
from benchc.plan.parallel import ParallelDims

from helpers import REPO, SPECS

TEMPLATES = REPO / "templates"


def plans(spec: str, targets=(), overrides=()):
    with in_repo():
        return plan_spec(Path("specs") / spec, targets=list(targets), overrides=list(overrides)).plans


def dims(**changes) -> ParallelDims:
    fields = dict(nodes=2, devices_per_node=8, world_size=16, data=16, tensor=1, pipeline=1,
                  sharding="none", training=True, meta_init=False)  # fmt: skip
    return ParallelDims(**{**fields, **changes})


@pytest.mark.parametrize("spec", sorted(p.name for p in SPECS.glob("*.bench")))
def test_every_plan_carries_its_layout_outside_its_json(spec):
    for plan in plans(spec):
        d = plan.dims
        assert d is plan.dims  # derived once, kept on the plan
        c, p = plan.cluster, plan.parallel
        assert (d.nodes, d.devices_per_node, d.world_size) == (c.nodes, c.devices_per_node, c.world_size)
        assert (d.data, d.tensor, d.pipeline, d.sharding) == (p.data, p.tensor, p.pipeline, p.sharding)
        assert d.training == (plan.workload.kind == "train")
        assert d.fills_world and d.degrees == d.world_size
        assert "dims" not in plan.to_dict()
        assert dataclasses.replace(plan) == plan  # not a field: equality and hash ignore it


def test_a_replaced_plan_derives_its_own_layout():
    plan = plans("sd3.bench", ["h100"])[0]
    assert plan.dims.effective_sharding == "none"
    changed = dataclasses.replace(plan, parallel=dataclasses.replace(plan.parallel, sharding="zero3"))
    assert changed.dims.deepspeed and changed.dims.zero_stage == 3 and not plan.dims.deepspeed


def test_facts_of_the_reference_specs():
    s1 = plans("sd3.bench", ["gaudi2"])[0].dims
    assert s1.distributed and s1.multi_node and not s1.deepspeed and s1.zero_stage is None
    s4 = {p.target.name: p.dims for p in plans("beluga-train.bench", ["gaudi2", "h100"])}
    assert s4["gaudi2"].deepspeed and s4["gaudi2"].zero_stage == 3 and s4["gaudi2"].shards_parameters
    assert s4["h100"].fsdp and s4["h100"].meta_init  # FSDP2 training builds the Llama on meta
    s5 = plans("beluga-infer.bench", ["h100"])[0].dims
    assert s5.tensor_parallel and s5.meta_init and not s5.training and not s5.deepspeed
    assert not plans("sd3-infer.bench", ["h100"])[0].dims.meta_init  # the MMDiT is built whole


def test_fsdp_on_one_device_runs_unsharded():
    one = dims(nodes=1, devices_per_node=1, world_size=1, data=1, sharding="fsdp")
    assert one.effective_sharding == "none" and not one.fsdp and one.shards_parameters
    assert dims(sharding="fsdp").fsdp
    assert not dims(sharding="zero2", training=False).deepspeed  # sharding is training's


@pytest.mark.parametrize(
    "changes",
    [{"world_size": 15}, {"nodes": 0, "world_size": 0}, {"data": 0}, {"sharding": "zero4"}],
)
def test_invariants_only_a_bug_breaks_are_asserted(changes):
    with pytest.raises(AssertionError):
        dims(**changes)


def test_degrees_that_do_not_fill_the_cluster_stay_a_located_error():
    assert not dims(data=8).fills_world  # a record like this is made; the validator refuses it
    with pytest.raises(BenchError) as caught:
        plans("sd3.bench", ["h100"], ["parallel.data=8"])
    found = [d for d in caught.value.diagnostics if "do not fill the cluster" in d.message]
    assert found and found[0].span is not None


def test_one_small_template_per_launcher_kind():
    for kind in LAUNCHER_KINDS:
        path = TEMPLATES / launcher_template(kind)
        assert path.exists(), path
        assert len(path.read_text().splitlines()) < 60, path
    with pytest.raises(AssertionError):
        launcher_template("srun")
    assert "{% include command %}" in (TEMPLATES / "launch.sh.j2").read_text()


@pytest.mark.parametrize(
    ("spec", "target", "overrides", "kind"),
    [
        ("sd3.bench", "h100", (), "torchrun"),
        ("sd3.bench", "gaudi2", (), "deepspeed"),  # several Gaudi nodes
        ("sd3.bench", "gaudi2", ("cluster.nodes=1", "parallel.data=8"), "mpirun"),
        ("beluga-train.bench", "gaudi2", (), "deepspeed"),
        ("sd3-infer.bench", "h100", (), "python"),
        ("sd3.bench", "h100", ("runtime=accelerate",), "accelerate"),
    ],
)
def test_the_launcher_kind_follows_the_layout(spec, target, overrides, kind):
    plan = plans(spec, [target], overrides)[0]
    assert launcher_kind(plan) == kind
