"""Profiling (measure.profile, --profile): the classifier on real torch.profiler output, the
setting from spec to program, the metrics' "profile" object, and profiled CPU runs of S1 and
S5 stored in a real store with their chrome traces."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jsonschema
import pytest
import torch
from codegen_helpers import in_repo, plan_literal, s1_files, spec_files
from static_checks import check_program

from benchc.catalog.habana import HABANA_SYMBOLS
from benchc.codegen.environment import environment
from benchc.codegen.points import render_point
from benchc.pipeline import plan_spec
from benchc.results.metrics import metrics_schema
from benchc.results.store import Store

from helpers import REPO, SPECS, run_cli

CATEGORIES = "matmul attention norm_elementwise communication optimizer copy other idle".split()


def profile_schema() -> dict:
    """The metrics schema's "profile" object, with the definitions it refers to."""
    schema = metrics_schema()
    return {**schema["properties"]["profile"], "$defs": schema["$defs"]}


def profile_code() -> dict:
    """core_profile.py.j2 as every program has it, run on its own (it needs torch and the
    standard library only)."""
    namespace = {"torch": torch, "gc": gc, "os": os, "contextlib": contextlib, "tempfile": tempfile}
    text = environment().get_template("core_profile.py.j2").render()
    exec(compile(text, "core_profile", "exec"), namespace)
    return namespace


class HostCPU:
    """The CPU adapter's profiling and timing surface (adapter_cpu.py.j2's Device)."""

    family = "cpu"

    def profiler_activities(self):
        return [torch.profiler.ProfilerActivity.CPU]

    def synchronize(self):
        pass

    def time_mark(self):
        return time.perf_counter()

    def durations(self, marks):
        return [end - start for start, end in zip(marks, marks[1:], strict=False)]


class TinyBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(64)
        self.qkv = torch.nn.Linear(64, 192)
        self.out = torch.nn.Linear(64, 64)

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).view(4, 32, 3, 4, 16).unbind(2)
        y = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                             v.transpose(1, 2))  # fmt: skip
        return self.out(y.transpose(1, 2).reshape(4, 32, 64)).square().mean()


def test_the_programs_hold_the_classifier_text_and_read_profile_from_plan():
    program = s1_files("cpu", smoke=True)["bench.py"]
    assert environment().get_template("core_profile.py.j2").render() in program
    assert 'PLAN["profile"] or args.profile' in program
    assert plan_literal(program)["profile"] is False
    profiled = s1_files("cpu", smoke=True, overrides=["measure.profile=true"])["bench.py"]
    assert plan_literal(profiled)["profile"] is True


@pytest.mark.integration  # about a second: the profiler's first start
def test_real_profiler_output_lands_in_its_categories(tmp_path):
    code = profile_code()
    torch.manual_seed(0)
    model = TinyBlock()
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    x = torch.randn(4, 32, 64)

    def step(_):
        model(x).backward()
        optimizer.step()
        optimizer.zero_grad()

    step(0)
    trace = tmp_path / "profile-trace.json"
    summary = code["profile_steps"](HostCPU(), 0, 2, step, str(trace))
    jsonschema.validate(summary, profile_schema())
    seconds = summary["categories"]
    assert list(seconds) == CATEGORIES and summary["steps"] == 2 and summary["activity"] == "cpu"
    assert seconds["matmul"] > 0 and seconds["attention"] > 0 and seconds["optimizer"] > 0
    assert sum(seconds.values()) == pytest.approx(summary["profiled_s"], rel=0.05)
    top = {category: {entry["name"] for entry in entries} for category, entries in summary["top"].items()}
    assert top["matmul"] & {"aten::mm", "aten::addmm"}
    assert any("scaled_dot_product" in name for name in top["attention"])
    # AdamW's elementwise updates run inside torch's Optimizer.step range: the optimizer's
    assert top["optimizer"] & {"aten::lerp_", "aten::add_", "aten::mul_", "aten::sqrt"}
    assert not top["norm_elementwise"] & {"aten::lerp_", "aten::add_", "aten::mul_"}
    assert summary["trace"] == "profile-trace.json"
    assert json.loads(trace.read_text())["traceEvents"]
    assert not list(tmp_path.glob(".trace-*"))  # written whole


def test_a_rank_other_than_0_takes_the_same_steps_but_records_nothing(tmp_path):
    code = profile_code()
    calls = []
    result = code["profile_steps"](HostCPU(), 1, 3, calls.append, str(tmp_path / "t.json"))
    assert result is None and calls == [0, 1, 2] and not list(tmp_path.iterdir())


@pytest.mark.parametrize("name, ranges, category", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", (), "communication"),
    ("c10d::allreduce_", (), "communication"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", (), "matmul"),
    ("nvjet_tst_192x192_64x3_1x2_h_bz_coopA_TNT", (), "matmul"),
    ("aten::addmm", (), "matmul"),
    ("triton_tem_fused_addmm_0", (), "matmul"),  # Inductor's matmul template
    ("triton_poi_fused_add_gelu_1", (), "norm_elementwise"),  # Inductor's pointwise kernel
    ("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", (), "attention"),
    ("aten::bmm", ("aten::_scaled_dot_product_attention_math", "aten::linear"), "attention"),
    ("Memcpy HtoD (Pageable -> Device)", (), "copy"),
    ("aten::copy_", ("aten::to",), "copy"),
    ("void at::native::multi_tensor_apply_kernel<...>", (), "optimizer"),
    ("aten::add_", ("Optimizer.step#AdamW.step",), "optimizer"),
    ("void at::native::vectorized_elementwise_kernel<4, ...>", (), "norm_elementwise"),
    ("aten::native_layer_norm", (), "norm_elementwise"),
    ("aten::add", (), "norm_elementwise"),
    ("aten::view", (), "other"),
])  # fmt: skip
def test_the_category_table(name, ranges, category):
    assert profile_code()["profile_category"](name, ranges) == category


def test_idle_is_wall_minus_the_union_of_kernel_intervals():
    summary = profile_code()["profile_summary"]
    spans = [  # two overlapping kernels (streams), one apart: busy 0.0-0.4 and 0.6-0.7
        ("gemm_a", (), 0.3, (0.0, 0.3)),
        ("ncclKernel", (), 0.3, (0.1, 0.4)),
        ("elementwise_kernel", (), 0.1, (0.6, 0.7)),
    ]
    result = summary(spans, 1.0, 1, "cuda")
    assert result["categories"]["idle"] == pytest.approx(0.5)
    assert result["categories"]["matmul"] == pytest.approx(0.3)
    assert result["categories"]["communication"] == pytest.approx(0.3)
    busy_beyond_wall = summary([("aten::mm", (), 2.0, None)], 1.0, 1, "cpu")
    assert busy_beyond_wall["categories"]["idle"] == 0.0  # never negative


def test_top_is_bounded_to_five_names_of_200_characters():
    spans = [(f"aten::mm_{i}" + "x" * 300, (), float(i), None) for i in range(8)]
    top = profile_code()["profile_summary"](spans, 100.0, 1, "cpu")["top"]["matmul"]
    assert len(top) == 5 and [entry["s"] for entry in top] == [7.0, 6.0, 5.0, 4.0, 3.0]
    assert all(len(entry["name"]) == 200 and entry["calls"] == 1 for entry in top)


def test_the_metrics_schema_bounds_the_profile_object():
    schema = profile_schema()
    top = {"matmul": [{"name": "gemm", "s": 0.1, "calls": 2}]}
    good = {"steps": 3, "profiled_s": 1.0, "activity": "cuda", "categories": dict.fromkeys(CATEGORIES, 0.1),
            "top": top, "trace": "profile-trace.json"}  # fmt: skip
    jsonschema.validate(good, schema)
    bad = [
        {**good, "top": {"matmul": [{"name": "g", "s": 0.1, "calls": 1}] * 6}},
        {**good, "top": {"matmul": [{"name": "g" * 201, "s": 0.1, "calls": 1}]}},
        {**good, "trace": "../elsewhere.json"},
        {**good, "categories": {**good["categories"], "idle": -1.0}},
        {**good, "activity": "tpu"},
    ]
    for value in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(value, schema)


def test_measure_profile_is_a_checked_setting_the_plan_shows(tmp_path):
    shown = run_cli("plan", str(SPECS / "beluga-infer.bench"), "--smoke", "--set", "measure.profile=true")
    assert shown.code == 0 and "profiled after the measured steps" in shown.out
    plain = run_cli("plan", str(SPECS / "beluga-infer.bench"), "--smoke")
    assert plain.code == 0 and "profiled" not in plain.out
    refused = run_cli("check", str(SPECS / "beluga-infer.bench"), "--set", "measure.profile=3")
    assert refused.code == 2 and "profile" in refused.err


@pytest.mark.parametrize("spec, target", [
    ("sd3.bench", "h100"), ("sd3.bench", "gaudi2"), ("beluga-infer.bench", "h100"),
    ("beluga-infer.bench", "gaudi2"), ("sd3-infer.bench", "h100"), ("sd3-infer.bench", "gaudi2"),
])  # fmt: skip
def test_accelerator_programs_with_profiling_pass_the_static_checks(spec, target):
    program = spec_files(spec, target, overrides=["measure.profile=true"])["bench.py"]
    report = check_program(program)
    assert report.problems == []
    assert report.habana_symbols <= set(HABANA_SYMBOLS)
    assert "torch.profiler.profile" in report.checked
    family = "HPU" if target == "gaudi2" else "CUDA"
    assert f"activity.{family}" in program
    # every torch.profiler / torch.autograd attribute the profiling code names exists here
    for chain in set(re.findall(r"torch\.(?:profiler|autograd)\.[A-Za-z_.]+", program)):
        obj = torch
        for part in chain.split(".")[1:]:
            obj = getattr(obj, part)
    for member in set(re.findall(r"\bactivity\.([A-Z0-9]+)\b", program)):
        assert hasattr(torch.profiler.ProfilerActivity, member)


def test_the_function_event_fields_the_program_reads_exist():
    code = environment().get_template("core_profile.py.j2").render()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        torch.mm(torch.ones(4, 4), torch.ones(4, 4))
    event = profiler.events()[0]
    for field in set(re.findall(r"\bevent\.([a-z_]+)", code)) | {"cpu_parent", "time_range"}:
        assert hasattr(event, field), field


# ---------------------------------------------------------------- real runs (integration)


def benchc(*args, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchc", *args, "--db", str(db)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def stored_run(db: Path):
    with Store(db) as store:
        (record,) = store.runs()
    return record


def assert_profiled(record, steps: int) -> None:
    assert record.status == "ok", record.cause
    profile = record.metrics["profile"]
    assert profile["steps"] == steps and profile["activity"] == "cpu"
    assert list(profile["categories"]) == CATEGORIES or set(profile["categories"]) == set(CATEGORIES)
    total = sum(profile["categories"].values())
    assert abs(total - profile["profiled_s"]) <= 0.05 * profile["profiled_s"]
    assert profile["categories"]["matmul"] > 0 and profile["categories"]["attention"] > 0
    trace = Path(record.log_path).parent / profile["trace"]
    assert trace.name == "profile-trace.json" and json.loads(trace.read_text())["traceEvents"]


@pytest.mark.integration
def test_a_profiled_s1_smoke_run_stores_its_categories_and_trace(tmp_path):
    db = tmp_path / "r.db"
    # one point of the sweep, one process (the S5 test profiles two ranks' communication)
    one = ["--set", "train.batch=16", "--set", "cluster.nodes=1", "--set", "cluster.devices_per_node=1",
           "--set", "parallel.data=1"]  # fmt: skip
    done = benchc("run", "specs/sd3.bench", *one, "--smoke", "-o", str(tmp_path / "b"), "--profile", db=db)
    assert done.returncode == 0, done.stdout + done.stderr
    record = stored_run(db)
    assert_profiled(record, 3)
    assert record.metrics["profile"]["categories"]["optimizer"] > 0
    assert record.metrics["steps"]["measured"] == 3  # the profiled steps are not measured ones


@pytest.mark.integration
def test_a_profiled_s5_smoke_run_stores_its_categories_and_trace(tmp_path):
    """S5 with `measure.profile = true` in its spec and no --profile flag (S1's test takes the
    flag); an S5 run without either records no profile and leaves no trace
    (tests/test_run_cpu.py::test_llama_inference_tokens_equal_transformers_greedy_generate)."""
    text = (SPECS / "beluga-infer.bench").read_text()
    assert "measure { metric = output_tokens_per_s }" in text
    spec = tmp_path / "profiled.bench"
    spec.write_text(text.replace("measure { metric = output_tokens_per_s }",
                                 "measure { metric = output_tokens_per_s; profile = true }"))  # fmt: skip
    db = tmp_path / "r.db"
    done = benchc("run", str(spec), "--smoke", "-o", str(tmp_path / "b"), db=db)
    assert done.returncode == 0, done.stdout + done.stderr
    record = stored_run(db)
    assert_profiled(record, 1)
    assert record.metrics["profile"]["categories"]["communication"] > 0  # tensor parallel 2, gloo
    # the report draws where the generation's time goes: the bar, the shares and the sentence
    report = benchc("report", "-o", str(tmp_path / "report"), db=db)
    assert report.returncode == 0, report.stdout + report.stderr
    page = (tmp_path / "report" / "report.md").read_text()
    assert "Shares of the profiled step time:" in page
    assert re.search(r"cpu at \S+ spends [\d.]+% of its step outside matrix multiplies", page), page
    (chart,) = (tmp_path / "report").glob("*-profile.png")
    assert chart.stat().st_size > 1000


@pytest.mark.integration
def test_job_sbatch_passes_profile_to_every_trial(tmp_path):
    with in_repo():  # Gaudi's single-node job runs launch.sh itself (mpirun, no srun)
        (plan,) = plan_spec(Path("specs/beluga-infer.bench"), targets=["gaudi2"]).plans
    job = render_point(plan, sbatch=True)["job.sbatch"]
    (tmp_path / "job.sbatch").write_text(job)
    (tmp_path / "bench.py").write_text("")
    (tmp_path / "launch.sh").write_text('printf "%s\\n" "$*" >> "$(dirname "$0")/calls.txt"\n')
    env = {**os.environ, "SLURM_JOB_ID": "7", "PATH": os.environ["PATH"]}
    command = ["bash", "job.sbatch", "--trials", "2", "--profile", "--run-dir", "runs"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls == [f"--metrics runs/metrics-{i}.json --profile" for i in (1, 2)]
    plain = subprocess.run(["bash", "job.sbatch", "--trials", "1", "--run-dir", "other"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert plain.returncode == 0 and (tmp_path / "calls.txt").read_text().splitlines()[-1] == (
        "--metrics other/metrics-1.json"
    )


@pytest.mark.parametrize("spec, after", [
    ("sd3.bench", "step_times = window.times()"),
    ("beluga-infer.bench", "gc.unfreeze()"),
    ("sd3-infer.bench", "gc.unfreeze()"),
])  # fmt: skip
def test_the_profiled_steps_come_after_the_measured_window_has_ended(spec, after):
    program = spec_files(spec, "h100")["bench.py"]
    assert program.count("profile = profile_steps(") == 1
    profiled = program.index("profile = profile_steps(")
    assert program.rindex(after) < profiled
    assert program.rindex('set_phase(metrics, "measuring")') < profiled


@pytest.mark.parametrize("command", ["run", "submit"])
def test_run_and_submit_take_profile(command):
    shown = run_cli(command, "--help")
    assert shown.code == 0 and "--profile" in shown.out and "measure.profile" in shown.out
