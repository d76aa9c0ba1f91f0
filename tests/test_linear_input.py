"""Large and odd input stays cheap and printable: diagnostics of a file with thousands of
mistakes are computed in linear time and capped when printed, and control characters from
the user's text never reach the terminal raw."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from benchc.diagnostics import MAX_SHOWN_PER_FILE, Source, printable

from helpers import REPO


def benchc(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchc", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


@pytest.mark.integration
def test_control_characters_from_a_spec_are_escaped_in_diagnostics(tmp_path):
    path = tmp_path / "cc.bench"
    path.write_text(
        'experiment e {\n  model mmdit { preset = "\\u001b[2Jboom\\u0007" }\n'
        "  train { batch = 4 }\n  targets = [cpu]\n}\n"
    )
    proc = benchc("check", str(path))
    assert proc.returncode == 2
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    assert "\\x1b[2Jboom\\x07" in proc.stderr  # shown, escaped: the user sees what they wrote


def test_printable_keeps_newlines_and_tabs_and_escapes_the_rest():
    assert printable("a\nb\tc") == "a\nb\tc"
    assert printable("\x1b[31mred\x9b") == "\\x1b[31mred\\x9b"


@pytest.mark.integration
def test_thousands_of_mistakes_are_found_fast_and_printed_capped(tmp_path):
    count = 3_000  # 15,000 tokens: under the 20,000-token limit of a file
    body = "".join(f"  train.unknown_{i} = {i}\n" for i in range(count))
    path = tmp_path / "many.bench"
    path.write_text(f"experiment e {{\n  model mmdit {{ depth = 2 }}\n{body}  targets = [cpu]\n}}\n")
    started = time.monotonic()
    proc = benchc("check", str(path), timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert elapsed < 30, elapsed  # minutes before the fix, on the same machine
    shown = proc.stderr.count(": error: ")
    assert shown == MAX_SHOWN_PER_FILE, shown
    assert f"and {count - MAX_SHOWN_PER_FILE} more errors in " in proc.stderr
    assert f"{count} errors found" in proc.stderr


def test_positions_are_computed_from_line_starts():
    text = "ab\ncd\n\nef"
    source = Source("s", text)
    for offset in range(len(text) + 1):
        before = text[:offset]
        expected = (before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1)
        assert source.position(offset) == expected, offset


def _numeric_settings():
    """(spec, --set path, maximum) for every bounded numeric setting the reference specs use."""
    from benchc.validate.schema import schema

    defs = schema()["$defs"]
    cases = []
    workloads = (("sd3.bench", "mmdit", "train"), ("beluga-train.bench", "llama", "train"),
                 ("sd3-infer.bench", "sd3", "infer"), ("beluga-infer.bench", "llama", "infer"))  # fmt: skip
    for spec, kind, workload in workloads:
        for key, node in defs["model"]["properties"][kind]["properties"].items():
            if "maximum" in node:
                cases.append((spec, f"model.{kind}.{key}", node["maximum"]))
        for key, node in defs[workload]["properties"].items():
            if "maximum" in node:
                cases.append((spec, f"{workload}.{key}", node["maximum"]))
    for section in ("cluster", "parallel", "measure"):
        for key, node in defs[section]["properties"].items():
            if "maximum" in node:
                cases.append(("sd3.bench", f"{section}.{key}", node["maximum"]))
    return cases


def test_every_numeric_setting_has_an_upper_bound_that_is_a_located_error():
    """No size, count, degree, token or step count is unbounded (a thousand-digit batch once
    compiled), and past the bound check refuses it at the --set, fast."""
    from benchc.diagnostics import BenchError
    from benchc.pipeline import plan_spec

    cases = _numeric_settings()
    assert len(cases) >= 50, len(cases)
    started = time.monotonic()
    for spec, path, maximum in cases:
        value = maximum * 10 if isinstance(maximum, int) else f"{maximum * 10:g}"
        try:
            plan_spec(REPO / "specs" / spec, overrides=[f"{path}={value}"])
        except BenchError as exc:
            messages = [d.message for d in exc.diagnostics]
            assert any(f"{path} must be at most" in m for m in messages), (path, messages)
            assert all(d.span is not None for d in exc.diagnostics)
        else:
            raise AssertionError(f"{path}={value} was accepted")
    assert time.monotonic() - started < 60


def test_decode_flops_are_a_closed_form_equal_to_the_sum_over_tokens():
    from census_helpers import llama_census

    from benchc.plan.flops import causal_lm_generate_flops

    census = llama_census(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=100)
    for input_tokens, output_tokens in ((1, 1), (3, 1), (16, 32), (128, 2048)):
        flops = causal_lm_generate_flops(census, input_tokens, output_tokens)
        context = input_tokens**2 + sum(input_tokens + t for t in range(1, output_tokens))
        tokens = input_tokens + output_tokens - 1
        head = 100 * 64  # the output head: once per generated token
        layers = 2.0 * census.dense_matmul * tokens
        assert flops == layers + 2.0 * head * output_tokens + 4.0 * 2 * 64 * context
    started = time.monotonic()
    causal_lm_generate_flops(census, 4_194_304, 4_194_304)
    assert time.monotonic() - started < 0.1


def _scaling_shapes():
    import importlib.util

    spec = importlib.util.spec_from_file_location("input_scaling", REPO / "benchmarks" / "input_scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SHAPES


def test_a_spec_of_almost_1_mib_of_each_shape_is_checked_quickly_with_located_errors(tmp_path):
    """The shapes of benchmarks/input_scaling.py (dotted keys, unknown keys and blocks,
    semicolons, duplicate settings, nesting, a huge comment), each just under the file limit."""
    from benchc.diagnostics import BenchError
    from benchc.pipeline import plan_spec

    for name, make in _scaling_shapes().items():
        path = tmp_path / "big.bench"
        path.write_text(make(1024 * 1024 - 64))
        started = time.monotonic()
        try:
            plan_spec(path)
        except BenchError as exc:
            assert all(d.span is not None and d.span.line >= 1 for d in exc.diagnostics), name
        elapsed = time.monotonic() - started
        assert elapsed < 10, (name, elapsed)  # 2 s on a quiet machine: benchmarks/README.md


@pytest.mark.integration
def test_a_keyword_cannot_name_an_experiment(tmp_path):
    for keyword in ("experiment", "include", "sweep", "true", "false"):
        path = tmp_path / "kw.bench"
        path.write_text(f"experiment {keyword} {{\n  model mmdit {{ depth = 2 }}\n  targets = [cpu]\n}}\n")
        proc = benchc("check", str(path))
        assert proc.returncode == 2 and "kw.bench:1:12:" in proc.stderr, (keyword, proc.stderr)
        assert "Traceback" not in proc.stderr


@pytest.mark.integration
def test_a_dotted_key_of_100000_parts_is_refused_at_once(tmp_path):
    path = tmp_path / "dot.bench"
    for parts, words in ((100_000, "tokens"), (9_000, "keys have at most 16")):
        path.write_text("experiment e {\n  " + ".".join(["a"] * parts) + " = 1\n}\n")
        started = time.monotonic()
        proc = benchc("check", str(path))
        assert proc.returncode == 2 and "dot.bench:2:" in proc.stderr, proc.stderr[:500]
        assert words in proc.stderr, proc.stderr[:500]
        assert time.monotonic() - started < 20  # 5 minutes and 23 GB before
