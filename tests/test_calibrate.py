"""`benchc calibrate`: its plan, the generated calibration program (static checks against the
installed torch and the habana allow-list, ruff, shellcheck), a real CPU calibration over two
gloo processes stored and shown by `targets` and `check`, its endings (failed, SIGINT,
SIGTERM), located errors for bad flags, and --ingest of a calibration file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from codegen_helpers import s1_files
from static_checks import check_program
from system_tools import Unavailable, ensure

from benchc.catalog.habana import HABANA_SYMBOLS
from benchc.codegen.calibration import render_files
from benchc.plan.calibration import calibration_plan
from benchc.results.calibrations import calibration_rows, latest_calibrations
from benchc.results.store import Store
from benchc.validate.capabilities import NOT_GENERATED_PRECISIONS

from helpers import REPO, SPECS, run_cli

FAMILIES = [
    ("cpu", True),
    ("cpu", False),
    ("h100", False),
    ("h200", True),
    ("gaudi2", False),
    ("gaudi3", True),
]


def _plan(target: str, **options):
    return calibration_plan(target, not_generated=NOT_GENERATED_PRECISIONS, **options)


def _files(tmp_path: Path, target: str, smoke: bool) -> Path:
    folder = tmp_path / f"{target}-{smoke}"
    folder.mkdir()
    for name, text in render_files(_plan(target, smoke=smoke)).items():
        (folder / name).write_text(text)
    return folder


# ---------------------------------------------------------------- the plan


def test_the_plan_measures_the_generated_precisions_and_fp8_on_cuda_only():
    assert _plan("cpu").precisions == ("fp32", "bf16", "fp16")
    assert _plan("h100").precisions == ("fp32", "bf16", "fp16", "fp8")
    assert _plan("a100").precisions == ("fp32", "bf16", "fp16")  # no fp8 on the A100
    assert "fp8" not in _plan("gaudi2").precisions  # Gaudi's fp8 needs Habana's kernels


def test_layouts_and_sizes():
    cpu, h100 = _plan("cpu"), _plan("h100", devices=1)
    assert (cpu.world_size, cpu.collectives) == (2, ("all_reduce", "all_gather", "reduce_scatter"))
    assert (h100.world_size, h100.collectives) == (1, ())  # one process: no collectives
    assert _plan("gaudi2").world_size == 8 and _plan("cpu", nodes=2).world_size == 4
    smoke, full = _plan("cpu", smoke=True).sizes, cpu.sizes
    assert max(smoke.matmul_n) < max(full.matmul_n) and smoke.copy_bytes < full.copy_bytes
    assert cpu.sizes.host_to_device_bytes is None and h100.sizes.host_to_device_bytes > 0
    assert _plan("cpu", repeat=7).sizes.repetitions == 7


def test_bad_targets_and_layouts_are_located_errors(tmp_path):
    out = tmp_path / "out"
    result = run_cli("calibrate", "--target", "h1000", "-o", str(out), "--db", str(tmp_path / "r.db"))
    assert result.code == 2 and "unknown target 'h1000'" in result.err
    assert "gaudi2, gaudi3, a100, h100, h200, cpu" in result.err and "Traceback" not in result.err
    result = run_cli("calibrate", "--target", "h100", "--devices", "9", "-o", str(out))
    assert result.code == 2 and "a h100 node has 8 devices" in result.err
    result = run_cli("calibrate", "--target", "h100", "--nodes", "2", "-o", str(out))
    assert result.code == 2 and "--compile-only" in result.err
    assert not out.exists() and not (tmp_path / "r.db").exists()


def test_an_output_that_is_a_file_or_unwritable_is_refused_with_nothing_written(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep")
    result = run_cli("calibrate", "--compile-only", "-o", str(afile))
    assert result.code == 2 and "it is a file, not a folder" in result.err
    assert afile.read_text() == "keep"
    result = run_cli("calibrate", "--compile-only", "-o", "/proc/benchc-nowhere/out")
    assert result.code == 2 and "/proc/benchc-nowhere/out" in result.err and "Traceback" not in result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_compile_only_writes_the_folder_whole(tmp_path):
    result = run_cli(
        "calibrate", "--compile-only", "--target", "cpu", "--target", "h100", "-o", str(tmp_path)
    )
    assert result.code == 0, result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu-1x2", "h100-1x8"]  # no staging left
    written = json.loads((tmp_path / "h100-1x8" / "calibration-plan.json").read_text())
    assert written["launcher"] == "torchrun" and written["world_size"] == 8 and "fp8" in written["precisions"]
    assert {p.name for p in (tmp_path / "cpu-1x2").iterdir()} == {
        "bench.py", "launch.sh", "job.sbatch", "calibration-plan.json", ".benchc.lock"}  # fmt: skip


# ---------------------------------------------------------------- the generated program


@pytest.mark.parametrize("target, smoke", FAMILIES)
def test_the_program_binds_to_the_installed_torch_and_the_habana_allow_list(target, smoke):
    program = render_files(_plan(target, smoke=smoke))["bench.py"]
    report = check_program(program)
    assert report.problems == []
    assert report.habana_symbols <= set(HABANA_SYMBOLS)
    assert bool(report.habana_symbols) == target.startswith("gaudi")
    if target in ("h100", "h200"):
        assert {"torch._scaled_mm", "torch.cuda.Event"} <= set(report.checked)
    compile(program, "bench.py", "exec")


def test_the_launcher_is_a_build_point_s_own():
    """A cpu calibration over 2 nodes x 1 process gets the launch.sh of the S1 cpu smoke point
    (2 nodes x 1), but for its header comments and rendezvous id (same templates and code)."""
    calibration = render_files(_plan("cpu", nodes=2, devices=1))["launch.sh"]
    point = s1_files("cpu", smoke=True)["launch.sh"]

    def body(text):
        return [line for line in text.splitlines() if not line.startswith(("#", "DEFAULT_RDZV_ID="))]

    assert "--rdzv-backend c10d" in calibration and body(calibration) == body(point)


@pytest.mark.integration
@pytest.mark.parametrize("target, smoke", FAMILIES)
def test_the_program_is_formatted_lint_clean_and_compiles(tmp_path, target, smoke):
    folder = _files(tmp_path, target, smoke)
    ruff = [sys.executable, "-m", "ruff"]
    fmt = subprocess.run([*ruff, "format", "--isolated", "--check", "--diff", "bench.py"], cwd=folder,
                         capture_output=True, text=True)  # fmt: skip
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    lint = subprocess.run([*ruff, "check", "--isolated", "--select", "E,F,W,I,B", "--ignore", "E501",
                           "bench.py"], cwd=folder, capture_output=True, text=True)  # fmt: skip
    assert lint.returncode == 0, lint.stdout + lint.stderr
    compiled = subprocess.run(
        [sys.executable, "-m", "py_compile", "bench.py"], cwd=folder, capture_output=True
    )
    assert compiled.returncode == 0, compiled.stderr


@pytest.mark.integration
def test_launch_sh_and_job_sbatch_parse_and_are_shellcheck_clean(tmp_path):
    try:
        ensure({"shellcheck": "shellcheck"})
    except Unavailable as exc:
        pytest.fail(f"shellcheck is required here: {exc}")
    files = []
    for target, smoke in [*FAMILIES, ("cpu-nodes", False), ("gaudi-nodes", False)]:
        if target.endswith("-nodes"):
            plan = _plan("cpu" if target == "cpu-nodes" else "gaudi2", nodes=2)
            folder = tmp_path / target
            folder.mkdir()
            for name, text in render_files(plan).items():
                (folder / name).write_text(text)
        else:
            folder = _files(tmp_path, target, smoke)
        files += [folder / "launch.sh", folder / "job.sbatch"]
    for file in files:
        parsed = subprocess.run(["bash", "-n", str(file)], capture_output=True, text=True)
        assert parsed.returncode == 0, f"{file}: {parsed.stderr}"
    lint = subprocess.run(["shellcheck", "-S", "warning", *map(str, files)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout


# ---------------------------------------------------------------- real calibrations


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """One real `benchc calibrate --target cpu --smoke`: 2 processes over gloo."""
    where = tmp_path_factory.mktemp("calibrated")
    db = where / "results.db"
    result = run_cli("calibrate", "--target", "cpu", "--smoke", "-o", str(where / "build"), "--db", str(db))
    return result, db


@pytest.mark.integration
def test_a_cpu_smoke_calibration_stores_every_measurement(calibrated):
    result, db = calibrated
    assert result.code == 0, result.out + result.err
    assert "matmul fp32 n=256" in result.out and "all_reduce: bus" in result.out
    assert "fp32 matmul" in result.out and "measured on" in result.out  # the summary table
    with Store(db) as store:
        (calibration,) = latest_calibrations(store).values()
        rows = calibration_rows(store)
    assert [r["status"] for r in rows] == ["ok"]
    assert calibration.target == "cpu" and calibration.smoke and calibration.world_size == 2
    assert set(calibration.matmul_tflops) == {"fp32", "bf16", "fp16"}
    assert all(v > 0 for v in calibration.matmul_tflops.values())
    assert calibration.memory_tb_s > 0 and calibration.launch_us > 0
    assert calibration.host_to_device_gb_s is None  # the cpu is the host
    assert set(calibration.bus_gb_s) == {"all_reduce", "all_gather", "reduce_scatter"}
    assert all(v > 0 for v in calibration.bus_gb_s.values())


@pytest.mark.integration
def test_targets_and_check_show_the_calibration(calibrated):
    _, db = calibrated
    shown = run_cli("targets", "--db", str(db))
    assert shown.code == 0 and "Measured by benchc calibrate" in shown.out
    line = next(line for line in shown.out.splitlines() if line.strip().startswith("cpu: bf16"))
    assert "TFLOP/s" in line and "GB/s" in line and "smoke sizes" in line
    facts = json.loads(run_cli("targets", "--json", "--db", str(db)).out)
    assert facts["h100"]["calibration"] is None
    assert facts["cpu"]["calibration"]["world_size"] == 2
    assert set(facts["cpu"]["calibration"]["bus_gb_s"]) == {"all_reduce", "all_gather", "reduce_scatter"}
    checked = run_cli("check", str(SPECS / "sd3.bench"), "--target", "cpu", "--smoke", "--db", str(db))
    assert checked.code == 0, checked.err
    assert "note: cpu: measured ceilings from benchc calibrate" in checked.err and "fp32" in checked.err
    none = run_cli("targets", "--db", str(db.with_name("absent.db")))
    assert "No calibrations stored" in none.out and not db.with_name("absent.db").exists()


@pytest.mark.integration
def test_a_failed_calibration_is_stored_with_its_cause(tmp_path):
    """The h100 program on this machine without a GPU: it fails, and says why."""
    db = tmp_path / "r.db"
    result = run_cli("calibrate", "--target", "h100", "--devices", "1", "--smoke", "-o", str(tmp_path / "b"),
                     "--db", str(db))  # fmt: skip
    assert result.code == 1, result.out + result.err
    with Store(db) as store:
        (row,) = calibration_rows(store)
        assert latest_calibrations(store) == {}
    assert row["status"] == "failed" and row["cause"]


@pytest.mark.integration
@pytest.mark.parametrize("sig, status, code", [(signal.SIGINT, "interrupted", 130),
                                               (signal.SIGTERM, "terminated", 143)])  # fmt: skip
def test_a_signal_to_benchc_ends_the_calibration_and_is_recorded(tmp_path, sig, status, code):
    db = tmp_path / "r.db"
    runner = subprocess.Popen([sys.executable, "-m", "benchc", "calibrate", "--target", "cpu", "-o",
                               str(tmp_path / "b"), "--db", str(db)], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
    seen = []
    for line in runner.stdout:  # once the program measures, its handlers are in place
        seen.append(line)
        if "matmul fp32" in line:
            break
    runner.send_signal(sig)
    output, _ = runner.communicate(timeout=60)
    assert runner.returncode == code, "".join(seen) + output
    with Store(db) as store:
        (row,) = calibration_rows(store)
        assert latest_calibrations(store) == {}
    assert row["status"] == status and row["ended_at"]


# ---------------------------------------------------------------- ingest


@pytest.mark.integration
def test_a_calibration_file_from_elsewhere_is_ingested_once(calibrated, tmp_path):
    _, db = calibrated
    (written,) = (db.parent / "build").rglob("calibration.json")
    copy = tmp_path / "metrics-1.json"
    copy.write_text(written.read_text())
    other = tmp_path / "r.db"
    first = run_cli("calibrate", "--ingest", str(copy), "--db", str(other))
    assert first.code == 0 and "stored (ok)" in first.out, first.err
    again = run_cli("calibrate", "--ingest", str(copy), "--db", str(other))
    assert again.code == 0 and "already stored" in again.out
    with Store(other) as store:
        assert len(calibration_rows(store)) == 1 and "cpu" in latest_calibrations(store)
    told = run_cli("ingest", str(copy), "--db", str(tmp_path / "runs.db"))  # a run's ingest says where
    assert told.code == 2 and f"benchc calibrate --ingest {copy}" in told.err
    assert not (tmp_path / "runs.db").exists()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "benchc-calibration", "status": "ok"}))
    refused = run_cli("calibrate", "--ingest", str(bad), "--db", str(tmp_path / "none.db"))
    assert refused.code == 2 and "does not match the benchc calibration schema" in refused.err
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("flags_given, message", [
    (["--time", "5"], "--partition, --account and --time are for --submit"),
    (["--submit", "--time", "abc"], "'abc' is not a valid --time"),
    (["--submit", "--partition", "a b"], "'a b' is not a valid --partition"),
])  # fmt: skip
def test_slurm_flags_are_checked_before_anything_is_written(tmp_path, flags_given, message):
    out = tmp_path / "cal"
    result = run_cli("calibrate", "--smoke", "-o", str(out), *flags_given)
    assert result.code == 2 and message in result.err, result.err
    assert not out.exists()
