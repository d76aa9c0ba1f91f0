"""The cpu target's fit: its memory is this host's, shared by the node's processes.

`check` warns (errors under --strict) when processes per node x the per-process estimate exceed
the host's memory, `estimate` gives each process its share, and the plans stay the same on every
host. BENCHC_HOST_MEMORY_BYTES stands for the host's memory, so the figures are the same
everywhere.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from benchc.pipeline import plan_spec
from benchc.plan.memory import HOST_MEMORY_VARIABLE, estimate_memory, host_memory
from benchc.validate.fits import smoke_advice

from helpers import REPO, SPECS, run_cli

SD3 = str(SPECS / "sd3.bench")
HOST = 24e9  # a 24 GB host: one 2B-parameter training process alone does not fit
SMALL = """experiment small {
  model llama { hidden = 256; layers = 4; heads = 4; kv_heads = 2; intermediate = 512; vocab = 1000 }
  train { precision = bf16; seq_len = 64; batch = 2 }
  cluster { nodes = 1; devices_per_node = 4 }
  targets = [cpu]
}
"""


@pytest.fixture
def host(monkeypatch):
    """host(bytes): this host's memory, as the fit check reads it."""
    return lambda value: monkeypatch.setenv(HOST_MEMORY_VARIABLE, str(value))


def test_host_memory_is_the_variable_else_the_machine_s(monkeypatch):
    monkeypatch.delenv(HOST_MEMORY_VARIABLE, raising=False)
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert host_memory() == physical > 0
    monkeypatch.setenv(HOST_MEMORY_VARIABLE, "not a number")
    assert host_memory() == physical
    monkeypatch.setenv(HOST_MEMORY_VARIABLE, "24e9")
    assert host_memory() == 24e9


def test_full_size_sd3_on_cpu_warns_per_node_at_the_model_and_smoke_does_not(host):
    host(HOST)
    result = plan_spec(SD3, ["cpu"])
    assert [w.severity for w in result.warnings] == ["warning", "warning"]
    first = result.warnings[0]
    assert first.message == (
        "cpu / batch-16 will not fit in this host's memory: 8 processes x 49.0 GB = 392.3 GB, "
        "over the 24.0 GB of this host (16.34x)"
    )
    assert "cpu / batch-32 will not fit in this host's memory: 8 processes x 61.2 GB" in (
        result.warnings[1].message
    )
    # the states (weights, gradients, AdamW) are the larger share: at the model's preset
    line = first.span.source.line_text(first.span.line)
    assert line[first.span.column - 1 : first.span.end_column - 1] == '"sd3-medium"'
    assert "8 x 12.7 GB = 101.5 GB, still over" in first.hint  # sharding = fsdp, per node
    assert "the 8 processes of a node (cluster.devices_per_node) share" in first.notes[0].message
    assert "--smoke: a tiny model that runs every code path in a minute" in first.hint
    assert "a target with more memory" not in first.hint and "tensor parallelism" not in first.hint
    # the same spec under --smoke fits, on the same host
    assert plan_spec(SD3, [], smoke=True).warnings == ()
    # the plans are the same whatever the host
    host(10**15)
    roomy = plan_spec(SD3, ["cpu"])
    assert roomy.warnings == ()
    assert [p.to_dict() for p in roomy.plans] == [p.to_dict() for p in result.plans]


def test_check_warns_and_strict_refuses_a_cpu_plan_over_the_host_s_memory(host):
    host(HOST)
    plain = run_cli("check", "specs/sd3.bench", "--target", "cpu", cwd=REPO)
    assert plain.code == 0, plain.err
    assert re.search(r"^\S+:\d+:\d+: warning: cpu / batch-16 will not fit in this host's memory: "
                     r"8 processes x 49\.0 GB", plain.err, flags=re.M)  # fmt: skip
    assert "^" in plain.err
    strict = run_cli("check", "--strict", "specs/sd3.bench", "--target", "cpu", cwd=REPO)
    assert strict.code == 2 and strict.out == ""
    assert "error: cpu / batch-16 will not fit in this host's memory" in strict.err
    smoke = run_cli("check", "--strict", "--smoke", "specs/sd3.bench", cwd=REPO)
    assert smoke.code == 0 and "will not fit" not in smoke.err


def test_processes_per_node_share_the_host_and_fewer_would_fit(host, write):
    spec = str(write("small.bench", SMALL))
    (plan,) = plan_spec(spec).plans
    one = estimate_memory(plan).total
    host(2.5 * one)  # one process fits, two fit, four do not
    (warning,) = plan_spec(spec).warnings
    assert warning.message.startswith("cpu / default will not fit in this host's memory: 4 processes x ")
    assert "(1.60x)" in warning.message
    assert "fewer processes per node: cluster.devices_per_node = 2 or less" in warning.hint
    assert run_cli("check", "--strict", spec).code == 2
    host(5 * one)
    assert plan_spec(spec).warnings == ()
    assert run_cli("check", "--strict", spec).code == 0


def test_estimate_gives_each_cpu_process_its_share_of_the_host(host):
    host(HOST)
    text = run_cli("estimate", "specs/sd3.bench", "-t", "cpu", cwd=REPO).out
    batch16, batch32 = re.findall(r"^  memory      (.*)$", text, flags=re.M)
    assert "does NOT fit" in batch16 and "(16.3x the memory)" in batch16  # 8 x 49.0 GB over 24 GB
    assert "8 processes x 49.0 GB = 392 GB of 24.0 GB, this host's memory" in batch16
    assert "does NOT fit" in batch32
    assert "states no memory size" not in text
    data = json.loads(run_cli("estimate", "specs/sd3.bench", "-t", "cpu", "--json", cwd=REPO).out)
    memory = [e["memory"] for e in data["estimates"]]
    assert [(m["capacity_bytes"], m["fits"]) for m in memory] == [(HOST / 8, False)] * 2
    plan = plan_spec(SD3, ["cpu"]).plans[0]
    memory = estimate_memory(plan)
    assert (memory.host, memory.processes, memory.capacity) == (HOST, 8, HOST / 8)
    # a target that states its memory keeps it, whatever the host
    h100 = estimate_memory(plan_spec(SD3, ["h100"]).plans[0])
    assert (h100.capacity, h100.host) == (80e9, None)


def test_a_full_size_cpu_plan_advises_smoke(write):
    full = plan_spec(SD3, ["cpu"]).plans[0]
    advice = smoke_advice(full)
    assert advice is not None and "2,028,328,000 parameters" in advice
    assert "most users want --smoke on a CPU" in advice
    assert smoke_advice(plan_spec(SD3, [], smoke=True).plans[0]) is None
    assert smoke_advice(plan_spec(SD3, ["h100"]).plans[0]) is None
    # a model under 100 million parameters runs as it is: no advice
    assert smoke_advice(plan_spec(str(write("small.bench", SMALL)), ["cpu"]).plans[0]) is None
