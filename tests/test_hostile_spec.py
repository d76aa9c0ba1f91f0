"""Specs and settings a careless or hostile user writes (issue 24): each refused at its
place with a message that says why, or shown safely."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import REPO, run_cli


@pytest.fixture
def s1_variant(tmp_path):
    """specs/sd3.bench with one line changed, in a copy of specs/ (for its include)."""
    shutil.copytree(REPO / "specs", tmp_path / "specs")

    def make(old: str, new: str) -> Path:
        text = (REPO / "specs/sd3.bench").read_text()
        assert old in text
        path = tmp_path / "specs" / "variant.bench"
        path.write_text(text.replace(old, new))
        return path

    return make


@pytest.mark.parametrize("setting", ['slurm.partition="gpu\\n"', 'slurm.account="me\\n"',
                                     'slurm.time="01:00:00\\n"'])  # fmt: skip
def test_a_trailing_newline_does_not_pass_a_pattern(setting):
    """The schema's patterns end with `$`, which Python's re lets match before a final
    newline: a newline would have reached job.sbatch's #SBATCH lines."""
    result = run_cli("check", "specs/sd3.bench", "--set", setting, cwd=REPO)
    name = setting.split("=")[0]
    assert result.code == 2 and f'"{setting.split("=", 1)[1][1:-1]}" is not a valid {name}' in result.err


def test_a_currency_with_a_trailing_newline_is_refused(s1_variant):
    prices = '  prices { currency = "USD\\n"; per_device_hour { h100 = 2.5 } }'
    spec = s1_variant("  measure { metric = images_per_s }", "  measure { metric = images_per_s }\n" + prices)
    result = run_cli("check", str(spec), cwd=REPO)
    assert result.code == 2 and '"USD\\n" is not a valid prices.currency' in result.err


def test_plan_shows_the_description_and_escapes_control_characters_in_references(s1_variant):
    spec = s1_variant('value = 927; unit = "images/s"', 'value = 927; unit = "images\\u001b[2J/s\\n"')
    result = run_cli("plan", str(spec), "--target", "gaudi2", cwd=REPO)
    assert result.code == 0, result.err
    assert "\x1b" not in result.out and "images\\x1b[2J/s\\n" in result.out
    assert "  about     SD3 MMDiT-ps2-d24 training, 16 devices, batch 16 and 32 per device (S1)" in result.out


def test_check_counts_the_points_compile_would_build(s1_variant):
    spec = s1_variant("  sweep train.batch = [16, 32]", "  on h100 { runtime = accelerate }")
    result = run_cli("check", str(spec), "--target", "cpu", "--target", "h100", cwd=REPO)
    assert result.code == 0, result.err
    assert result.out.strip().endswith(
        "experiment sd3_mmdit_train, 2 build points over 2 targets (cpu 1, h100 1)"
    )
    same = run_cli("check", "specs/sd3.bench", cwd=REPO)
    assert same.out.strip().endswith("3 targets x 2 points (gaudi2, h100, a100)")


def test_a_sweep_listing_a_value_twice_is_refused_at_the_second(s1_variant):
    spec = s1_variant("  sweep train.batch = [16, 32]", "  sweep train.batch = [16, 32, 16]")
    result = run_cli("check", str(spec), cwd=REPO)
    assert result.code == 2
    assert f"{spec}:18:32: error: sweep train.batch lists 16 twice (values 1 and 3)" in result.err


@pytest.mark.parametrize("spec, kind", [("beluga-infer.bench", "llama"), ("sd3-infer.bench", "sd3")])
def test_a_weights_path_with_a_control_character_is_refused(spec, kind):
    result = run_cli("check", f"specs/{spec}", "--set", f'model.{kind}.weights="a\\u0000b"', cwd=REPO)
    assert result.code == 2
    assert "--set[1]:1:" in result.err and "the weights path holds a control character (U+0000)" in result.err


def test_tpot_needs_two_output_tokens():
    result = run_cli("check", "specs/beluga-infer.bench", "--set", "infer.output_tokens=1",
                     "--set", "measure.metric=tpot_s", cwd=REPO)  # fmt: skip
    assert result.code == 2
    assert (
        "--set[2]:1:16: error: metric tpot_s needs at least 2 output tokens; infer.output_tokens = 1"
        in result.err
    )
    fine = run_cli("check", "specs/beluga-infer.bench", "--set", "infer.output_tokens=2",
                   "--set", "measure.metric=tpot_s", cwd=REPO)  # fmt: skip
    assert fine.code == 0, fine.err


def test_a_quoted_experiment_name_gets_a_hint_about_names(tmp_path):
    spec = tmp_path / "q.bench"
    spec.write_text('experiment "quoted" {\n  targets = [cpu]\n}\n')
    result = run_cli("check", str(spec), cwd=REPO)
    assert result.code == 2
    assert (
        "hint: an experiment's name is a bare identifier, not a string: experiment quoted { ... }"
        in result.err
    )
    assert "keyword" not in result.err
