"""An out-of-memory ending (issue 36, item 7): an allocation that does not fit is recorded with
cause "oom" and the memory benchc estimated beside it, in the metrics, `benchc runs`, `show`
and the report. On the CPU the allocation is made to fail for real: the run is held to 6 GB of
address space (ulimit -v), which torch and the libraries fit in and the step does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchc.runner.execute import failure_cause

from helpers import REPO, run_cli

SPEC = """experiment oom {
  model causal_lm {
    model_type = "llama"; hidden = 64; layers = 2; heads = 4; kv_heads = 2; intermediate = 96
    vocab = 256; max_positions = 256
  }
  train { precision = fp32; batch = 262144; seq_len = 24; steps = 3; warmup = 1; optimizer = sgd(lr = 0.01) }
  targets = [cpu]
}
"""


@pytest.mark.integration
def test_an_allocation_that_fails_on_the_cpu_is_recorded_as_oom_with_the_estimate(tmp_path):
    spec = tmp_path / "o.bench"
    spec.write_text(SPEC)
    assert run_cli("compile", str(spec), "-o", str(tmp_path / "out")).code == 0
    point, db = tmp_path / "out/oom/cpu/default", tmp_path / "r.db"
    # 6 GB of address space: torch and the libraries load (one thread, two malloc arenas, so
    # a machine of many cores reserves no more), the step's 76 GB do not
    limited = f"ulimit -v 6000000; exec {sys.executable} -m benchc run {point} --db {db}"
    # a fresh interpreter, not the tests' warm one: what it holds is the subject here
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2", "PYTHON": sys.executable}
    run = subprocess.run(["bash", "-c", limited], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert run.returncode != 0 and "1 failed" in run.stdout, run.stdout + run.stderr
    (metrics,) = point.glob("runs/*/metrics.json")
    error = json.loads(metrics.read_text())["error"]
    (estimate,) = json.loads(run_cli("estimate", str(spec), "--json").out)["estimates"]
    assert error["cause"] == "oom" and "can't allocate memory" in error["message"]
    total = estimate["memory"]["total_bytes"]
    assert error["memory_estimate"] == {"bytes_per_device": total, "device_bytes": None}
    said = f"oom: out of memory on rank 0 (estimated {total / 1e9:.2f} GB per device)"
    listed = run_cli("runs", "--db", str(db)).out
    assert said in listed
    (run_id,) = [w for w in listed.split() if len(w) == 12 and all(c in "0123456789abcdef" for c in w)]
    assert json.loads(run_cli("show", run_id, "--db", str(db)).out)["cause"].startswith("oom: out of memory")
    assert run_cli("report", "--db", str(db), "-o", str(tmp_path / "rep")).code == 0
    assert said in (tmp_path / "rep/report.md").read_text()


def test_a_device_out_of_memory_says_the_estimate_and_the_device_s_memory():
    """CUDA's OutOfMemoryError as a program records it: the cause names the estimate and the
    target's memory; a failure of another kind is not called oom."""
    oom = {"type": "OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 2 GiB", "rank": 3,
           "cause": "oom", "memory_estimate": {"bytes_per_device": 91.5e9, "device_bytes": 80e9}}  # fmt: skip
    assert failure_cause({"error": oom}, [], 1, "") == (
        "oom: out of memory on rank 3 (estimated 91.50 GB per device, of 80.0 GB): CUDA out of memory. "
        "Tried to allocate 2 GiB"
    )
    other = {"type": "ValueError", "message": "bad shape", "rank": 0, "cause": None}
    assert failure_cause({"error": other}, [], 1, "") == "rank 0 raised ValueError: bad shape"
