"""`benchc export --format mlflow` (issue 36, item 4) into a real MLflow tracking store (sqlite),
read back with MLflow's own client: one MLflow experiment per benchc experiment, one MLflow run
per stored run with its params, metrics, tags and artifacts, and a second export that updates
without duplicating."""

from __future__ import annotations

import subprocess
import sys

import pytest
from report_store import store_run
from scripted_points import ok_metrics

from benchc.results.store import Store

pytestmark = pytest.mark.integration

TTFT = {"p50": 0.05, "p90": 0.06, "p99": 0.07, "mean": 0.055, "samples": 2}
ITL = {"p50": 0.01, "p90": 0.02, "p99": 0.03, "mean": 0.011, "samples": 62}


def benchc(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchc", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def store_generation(db, throughput: float) -> str:
    """An ok generation run on h200 with its latency distributions, a bf16 point of its own."""
    m = ok_metrics(throughput, target="h200", point="precision-bf16")
    m.update(
        experiment="llm_infer", workload="infer", metric="output_tokens_per_s", device_name="NVIDIA H200"
    )
    latency = {"ttft": TTFT, "itl": ITL, "itl_missing": None}
    m["generation"] = {"batch": 8, "input_tokens": 16, "output_tokens": 32, "ttft_s": 0.05, "tpot_s": 0.01,
                       "first_sequence": [1, 2], "latency_s": latency}  # fmt: skip
    m["energy"] = {"joules": 12.0, "per_unit_j": 0.002, "mean_w": 600.0, "seconds": 0.02,
                   "source": "NVML total energy counter", "why": None}  # fmt: skip
    with Store(db) as store:
        run_id = store.start(experiment="llm_infer", target="h200", point="precision-bf16",
                             point_values={"infer.precision": "bf16"}, smoke=False, spec_path=None,
                             spec_sha256=None, build_path=None, log_path=None, plan=None, series="g", trial=1,
                             environment={"benchc": "0.1.0", "spec_repository": {"revision": "ab" * 20,
                                                                                 "dirty": True}})  # fmt: skip
        store.finish(run_id, "ok", None, m)
    return run_id


def test_two_exports_give_one_experiment_each_and_one_run_per_stored_run(tmp_path):
    from mlflow.tracking import MlflowClient

    db, uri = tmp_path / "results.db", f"sqlite:///{tmp_path / 'mlflow.db'}"
    store_run(db, "h100", 120.0)
    store_run(db, "gaudi2", 150.0)
    generation = store_generation(db, 900.0)
    with Store(db) as store:
        failed = store.start(experiment="llm_infer", target="h200", point="precision-bf16", point_values={},
                             smoke=False, spec_path=None, spec_sha256=None, build_path=None, log_path=None,
                             environment={}, plan=None, series="g", trial=2)  # fmt: skip
        store.finish(failed, "failed", "oom: out of memory on rank 0", None)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    first = benchc("export", "--format", "mlflow", "--tracking-uri", uri, "--db", str(db), cwd=workdir)
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"exported 4 run(s) of 2 experiment(s) to MLflow at {uri}: 4 created, 0 updated\n"
    assert first.stderr == ""  # MLflow's own logging (its store's migrations) kept quiet
    store_run(db, "a100", 90.0)  # a run stored after the first export
    again = benchc("export", "--format", "mlflow", "--tracking-uri", uri, "--db", str(db), cwd=workdir)
    assert again.returncode == 0, again.stderr
    assert "5 run(s) of 2 experiment(s)" in again.stdout and "1 created, 4 updated" in again.stdout
    assert not any(workdir.iterdir())  # nothing in the working folder (MLflow's ./mlruns default)

    client = MlflowClient(tracking_uri=uri)
    experiments = {e.name: e for e in client.search_experiments()}
    assert set(experiments) - {"Default"} == {"sd3_mmdit_train", "llm_infer"}
    runs = {
        name: client.search_runs([experiments[name].experiment_id])
        for name in ("sd3_mmdit_train", "llm_infer")
    }
    assert len(runs["sd3_mmdit_train"]) == 3 and len(runs["llm_infer"]) == 2  # none twice
    with Store(db) as store:
        stored = {r.id: r for r in store.runs()}
    seen = {run.data.tags["benchc.run_id"]: run for found in runs.values() for run in found}
    assert set(seen) == set(stored)

    h100 = next(r for r in runs["sd3_mmdit_train"] if r.data.params["target"] == "h100")
    assert h100.data.params == {"target": "h100", "point": "batch-16", "optimize": "unknown",
                                "smoke": "false", "train.batch": "16"}  # fmt: skip
    assert h100.data.metrics["throughput"] == 120.0 and h100.data.metrics["throughput_per_device"] == 60.0
    assert h100.data.metrics["step_time_median_s"] == 0.04 and 0 < h100.data.metrics["mfu"] < 1
    assert h100.info.status == "FINISHED"

    llm = seen[generation]
    assert llm.data.params["infer.precision"] == "bf16" and llm.data.params["point"] == "precision-bf16"
    for kind, figures in (("ttft", TTFT), ("itl", ITL)):
        for p in ("p50", "p90", "p99"):
            assert llm.data.metrics[f"{kind}_{p}_s"] == figures[p]
    tags = llm.data.tags
    assert (tags["benchc.version"], tags["benchc.spec_revision"], tags["benchc.spec_dirty"]) == (
        "0.1.0", "ab" * 20, "true")  # fmt: skip
    assert tags["device"] == "NVIDIA H200" and tags["benchc.status"] == "ok"
    energy = [llm.data.metrics[k] for k in ("energy_j", "energy_per_unit_j", "mean_power_w")]
    assert energy == [12.0, 0.002, 600.0]
    assert tags["benchc.energy_source"] == "NVML total energy counter" and "benchc.energy_why" not in tags
    assert "energy_j" not in h100.data.metrics  # a run whose metrics have no energy: none exported
    artifacts = {a.path for a in client.list_artifacts(llm.info.run_id)}
    assert artifacts == {"metrics.json"}  # no build manifest and no plan kept for it
    assert {a.path for a in client.list_artifacts(h100.info.run_id)} == {"metrics.json", "plan.json"}
    gone = seen[failed]
    assert gone.info.status == "FAILED" and gone.data.tags["benchc.cause"].startswith("oom: ")
    assert not gone.data.metrics  # a failed run has no figures to show
    assert (tmp_path / "mlflow-artifacts" / "llm_infer").is_dir()  # beside the database


def test_the_mlflow_options_are_refused_where_they_would_be_ignored(tmp_path):
    db = tmp_path / "r.db"
    store_run(db, "h100", 120.0)
    cases = [
        (["--format", "mlflow"], "--format mlflow needs a tracking store"),
        (["--format", "mlflow", "--tracking-uri", "sqlite:///x.db", "-o", "x.csv"],
         "-o/--output is for --format json and csv"),
        (["--format", "csv", "--tracking-uri", "sqlite:///x.db"], "--tracking-uri is for --format mlflow"),
    ]  # fmt: skip
    for args, message in cases:
        command = [sys.executable, "-m", "benchc", "export", *args, "--db", str(db)]
        result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True,
                                env={"PATH": "/usr/bin:/bin"})  # fmt: skip
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.db"]  # nothing written
