"""The numerical first-contact check of every training program: the first step's loss against
an eager forward of the same weights, batch and random draws (torch.compile off, no gradient),
before any optimizer step, within a tolerance per precision. Here it passes for real programs,
and a deliberately wrong compiled block (a Dynamo backend that rolls each block's output channels)
ends the run with the cause `numerics`, both losses named, the check in the metrics. Every
training program's check on both tiers under both runtimes: tests/test_tiers.py
(test_no_host_synchronisation_inside_the_measured_steps); compiled: its compile-cache test."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from program_helpers import compile_point, load_program

from benchc.results.store import Store

from helpers import REPO, warm_python_env

pytestmark = pytest.mark.integration

# A compiler bug stood in for: each compiled block returns its outputs zeroed (an output
# buffer never written) or NaN (what Inductor's AVX-512 bf16 code gave on an AMX Xeon).
WRONG_BACKEND = """

def wrong_backend(graph, example_inputs):
    \"\"\"A deliberately wrong compiler: each output of the block comes back times {factor}.\"\"\"

    def run(*args):
        outputs = graph(*args)
        return type(outputs)(o * {factor} if o.is_floating_point() else o for o in outputs)

    return run
"""


def launch(point, metrics) -> subprocess.CompletedProcess:
    """The point's launch.sh, as a user runs it, writing its metrics to `metrics`."""
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "2", **warm_python_env()}
    command = ["bash", str(point / "launch.sh"), "--metrics", str(metrics)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def run_point(point, db) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchc", "run", str(point), "--db", str(db)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


WRONG = [("0", "fp32", "fp32 allows 0.10%"), ('float("nan")', "bf16", "bf16 allows 2.00%")]


@pytest.mark.parametrize("factor, precision, allows", WRONG)
def test_a_wrong_compiled_block_ends_the_run_as_numerics_with_both_losses(
    tmp_path, factor, precision, allows
):
    point = compile_point(tmp_path, "sd3.bench", "train.compile=true", f"train.precision={precision}")
    program = (point / "bench.py").read_text()
    compiled = "blocks[index] = torch.compile(block, fullgraph=True, **options)"
    assert compiled in program
    program = program.replace(
        compiled, "blocks[index] = torch.compile(block, fullgraph=True, backend=wrong_backend)"
    )
    wrong = WRONG_BACKEND.format(factor=factor)
    program = program.replace(
        "\n# ==== benchc: the resolved plan", wrong + "\n\n# ==== benchc: the resolved plan"
    )
    (point / "bench.py").write_text(program)
    done = run_point(point, tmp_path / "r.db")
    assert done.returncode == 1, done.stdout + done.stderr
    (record,) = Store(tmp_path / "r.db").runs()
    check = record.metrics["first_step_check"]
    assert record.status == "failed" and record.cause.startswith("numerics on rank 0: "), record.cause
    assert check["passed"] is False and check["compiled"] is True
    first, reference = check["first_loss"], check["reference_loss"]
    assert reference is not None and 1.0 < reference < 4.0  # the eager forward is sound
    if factor == "0":
        assert check["relative_difference"] > 0.05, check
        assert f"{first:.6g}" in record.cause
    else:  # NaN: no difference to give, both values named all the same
        assert first is None and check["relative_difference"] is None
        assert "loss nan differs" in record.cause
    assert f"{reference:.6g}" in record.cause and allows in record.cause, record.cause
    assert record.metrics["error"]["type"] == "NumericsMismatch"
    assert record.metrics["phase"] == "compiling" and record.metrics["progress"]["step"] == 1


def test_the_first_step_of_a_program_without_warmup_is_checked_after_the_window(tmp_path):
    """No warmup step: the first step is measured, and nothing waits for the device inside the
    window; its loss is read with the others once the window is over, and checked then."""
    point = compile_point(tmp_path, "sd3.bench", "train.steps=2", "train.warmup=0", "train.precision=fp32")
    metrics = tmp_path / "metrics.json"
    done = launch(point, metrics)
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = json.loads(metrics.read_text())
    assert recorded["steps"]["warmup"] == 0
    check = recorded["first_step_check"]
    assert check["passed"] and check["first_loss"] == recorded["loss"]["first"]


def test_the_check_fails_a_rank_whose_own_step_passed_when_another_ranks_did_not(tmp_path):
    """Every rank checks its own batch; the worst difference is agreed by all, so all end
    alike, and a rank whose own step was fine says that another's was not."""
    point = compile_point(tmp_path, "sd3.bench")
    bench = load_program(point / "bench.py")
    check = {"compiled": True, "relative_difference": 1e-6, "worst_relative_difference": 0.5,
             "tolerance": 0.02}  # fmt: skip
    message = str(bench.numerics_error(check, 2.0, 2.000002))
    assert message.startswith("another rank's compiled first step differs from its eager forward by 50.00%")
    own = str(bench.numerics_error({**check, "relative_difference": 0.5}, 2.0, 3.0))
    assert own.startswith("the compiled first step's loss 3 differs from an eager forward's 2 ")
    assert "by 50.00%" in own
    nan = str(bench.numerics_error({**check, "relative_difference": None}, 2.0, float("nan")))
    assert "loss nan differs from an eager forward's 2 on the same weights" in nan
