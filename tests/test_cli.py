"""The benchc command as users run it: exit codes, output, and no torch on the check path."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from helpers import REPO, SPECS, heavy_modules_imported_by, run_benchc, run_cli

ALL_SPECS = sorted(str(p.relative_to(REPO)) for p in SPECS.glob("*.bench"))


def test_check_accepts_every_reference_spec():
    result = run_cli("check", *ALL_SPECS, cwd=REPO)
    assert result.code == 0, result.err
    assert result.out.count("ok: ") == len(ALL_SPECS) == 9


def test_check_smoke_accepts_every_reference_spec():
    result = run_cli("check", "--smoke", *ALL_SPECS, cwd=REPO)
    assert result.code == 0, result.err


def test_check_reports_each_bad_spec_and_still_checks_the_good_ones(write):
    bad = write("bad.bench", "experiment e {")
    result = run_cli("check", str(bad), str(SPECS / "sd3.bench"))
    assert result.code == 2
    assert "ok: " in result.out and "this block is not closed" in result.err


def test_plan_json_for_beluga_train_on_gaudi2():
    result = run_cli("plan", "specs/beluga-train.bench", "--target", "gaudi2", "--json", cwd=REPO)
    assert result.code == 0, result.err
    (plan,) = json.loads(result.out)["plans"]
    assert plan["cluster"]["world_size"] == 256
    w = plan["workload"]
    assert (w["micro_batch"], w["grad_accum"], plan["parallel"]["data"]) == (2, 2, 256)
    assert w["global_batch"] == 1024 == w["micro_batch"] * w["grad_accum"] * plan["parallel"]["data"]


def test_plan_text_lists_every_point():
    result = run_cli("plan", "specs/sd3.bench", cwd=REPO)
    assert result.code == 0
    headers = re.findall(r"^sd3_mmdit_train / (\w+) / (\S+)", result.out, flags=re.M)
    assert headers == [(t, p) for t in ("gaudi2", "h100", "a100") for p in ("batch-16", "batch-32")]
    assert "reference 927 images/s" in result.out


def test_targets_table_and_json():
    """What benchc generates is told apart from what the chip has: fp8 is the chip's only."""
    lines = run_cli("targets").out.splitlines()
    assert lines[0].split()[-4:] == ["benchc", "runs", "chip", "only"]
    gaudi2 = next(line for line in lines if line.startswith("gaudi2"))
    assert gaudi2.split()[-2:] == ["fp32,bf16", "fp8"]
    table = json.loads(run_cli("targets", "--json").out)
    assert set(table) == {"gaudi2", "gaudi3", "a100", "h100", "h200", "cpu"}
    assert table["h100"]["peak_tflops"]["fp8"] == 1979.0 and table["cpu"]["peak_tflops"]["bf16"] is None
    assert "fp8" in table["h100"]["precisions"] and table["h100"]["generated_precisions"] == [
        "fp32",
        "bf16",
        "fp16",
    ]


def test_usage_errors_exit_2():
    missing = run_cli("plan")
    assert missing.code == 2 and "the following arguments are required: SPEC" in missing.err
    unknown = run_cli("frobnicate")
    assert unknown.code == 2 and "invalid choice: 'frobnicate'" in unknown.err


@pytest.mark.integration
def test_real_process_exit_codes_and_no_traceback():
    ok = run_benchc("check", *ALL_SPECS)
    assert ok.code == 0, ok.err
    bad = run_benchc("check", "tests/bad/include-cycle.bench")
    assert bad.code == 2 and "include cycle" in bad.err and "Traceback" not in bad.err
    missing = run_benchc("check", "no/such/file.bench")
    assert missing.code == 2 and "no such file" in missing.err


@pytest.mark.integration
def test_check_and_plan_never_import_torch():
    commands = [["plan", "specs/sd3.bench", "--json"], ["check", "specs/beluga-train.bench", "--smoke"]]
    assert heavy_modules_imported_by(*commands) == []


@pytest.mark.integration
def test_importtime_of_check_shows_no_torch():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "benchc", "check", "specs/sd3.bench"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "benchc.pipeline" in imported  # the measurement saw the front end
    assert not {m for m in imported if m.split(".")[0] == "torch"}


@pytest.mark.integration
def test_a_reader_that_leaves_early_does_not_turn_errors_into_success():
    """`benchc check bad.bench 2>&1 | head -1`: the status stays 2 however early head leaves."""
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-m", "benchc", "check", "tests/bad/several-errors.bench",
                                 "tests/bad/unknown-key.bench"], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)  # fmt: skip
        proc.stdout.read(1)
        proc.stdout.close()
        assert proc.wait(timeout=60) == 2
    proc = subprocess.Popen([sys.executable, "-m", "benchc", "plan", "specs/sd3.bench"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    proc.stdout.read(1)
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0 and b"Traceback" not in proc.stderr.read()


def test_a_model_setting_without_its_kind_gets_the_kind_in_the_hint():
    result = run_cli("check", "specs/sd3.bench", "--set", "model.depth=3", cwd=REPO)
    assert result.code == 2 and "model settings go under the model kind: model.mmdit.depth" in result.err


def test_the_same_spec_compiles_to_the_same_bytes_from_any_folder(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    assert run_cli("compile", "specs/sd3.bench", "--smoke", "-o", str(first), cwd=REPO).code == 0
    assert (
        run_cli("compile", str(REPO / "specs/sd3.bench"), "--smoke", "-o", str(second), cwd=tmp_path).code
        == 0
    )
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files and all((first / f).read_bytes() == (second / f).read_bytes() for f in files)


@pytest.mark.integration
def test_each_command_builds_only_its_group_and_help_lists_every_command(tmp_path):
    import importlib

    from benchc import cli

    for group in cli.GROUPS:
        module = importlib.import_module(f"benchc.commands.{group}")
        assert {c for c, g in cli.COMMAND_GROUPS.items() if g == group} == set(module.COMMANDS), group
    assert cli._groups_for(["compile", "x.bench"]) == ("build",)
    assert cli._groups_for(["--color", "never", "report"]) == ("results",)
    assert cli._groups_for(["--help"]) == cli.GROUPS and cli._groups_for(["comple"]) == cli.GROUPS
    top = run_cli("--help")
    assert top.code == 0 and all(command in top.out for command in cli.COMMAND_GROUPS), top.out
    wrong = run_cli("comple", "specs/sd3.bench")
    assert wrong.code == 2 and "invalid choice: 'comple'" in wrong.err and "compile" in wrong.err
    # a compile never imports the results store, the report or the cluster client
    found = subprocess.run([sys.executable, "-c", "import sys; from benchc.cli import main; "
                            "main(['compile', 'specs/sd3.bench', '-o', sys.argv[1]]); "
                            "print(sorted(m for m in sys.modules if m.startswith(('benchc.results', "
                            "'benchc.report', 'benchc.cluster', 'sqlite3'))))", str(tmp_path)],
                           cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip().splitlines()[-1] == "[]"


def test_compile_says_what_check_warns_of_and_still_writes(tmp_path):
    """A point that will not fit its device's memory: compile (and so run and submit, which
    compile a spec the same way) prints check's warning, located, and writes the point."""
    spec = tmp_path / "big.bench"
    spec.write_text('experiment big {\n  model llama { preset = "llama-2-70b" }\n  train { seq_len = 512 }\n'
                    "  targets = [h100]\n}\n")  # fmt: skip
    check = run_cli("check", str(spec))
    result = run_cli("compile", str(spec), "-o", str(tmp_path / "out"))
    assert check.code == result.code == 0
    warning = "big.bench:2:26: warning: h100 / default will not fit in memory"
    assert warning in check.err and warning in result.err
    assert (tmp_path / "out/big/h100/default/bench.py").is_file()
