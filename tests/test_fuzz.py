"""Fuzzing the front end and the code generator with hypothesis (strategies: tests/fuzz_specs.py).

Property: for any input, `check`, `plan`, `fmt` and `compile` either succeed or end with located user
errors (exit 2, each error as FILE:LINE:COL), never a traceback, never a hang, within a time
and a memory bound; and a compile that succeeds gives the same bytes when run again.

CI runs the "ci" profile (the default): a fixed, bounded number of examples, derandomized so
every run tries the same inputs. A long run chooses the "long" profile by giving the number of
examples, with a fresh random seed each time:

    BENCHC_FUZZ_EXAMPLES=100000 .venv/bin/python -m pytest -q tests/test_fuzz.py -p no:cacheprovider

(the property of generated specs runs 1/10 of that number and the one through the command
line 1/200, at least 25: each of its examples starts benchc three times). 100,000 examples take
about 1.5 hours on two cores; 20,000 took 9 min 15 s on 2026-12-05. A failure prints the input as a
`Case(...)` expression and a `@reproduce_failure` blob; add the Case to KNOWN_NASTY in
tests/fuzz_specs.py once the bug is fixed, with what it must end as in EXPECTED below.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest
from fuzz_specs import (
    BASE,
    BASE_NAME,
    FRAGMENT,
    FRAGMENT_NAME,
    KNOWN_NASTY,
    WELL_FORMED,
    Case,
    cases,
    spec_texts,
)
from hypothesis import HealthCheck, example, given, settings

from benchc.codegen.build import compile_plans
from benchc.diagnostics import BenchError, Diagnostic, Source, format_diagnostics
from benchc.frontend.document import load_document
from benchc.frontend.format import format_source
from benchc.frontend.source import read_source
from benchc.pipeline import plan_spec
from benchc.plan.summary import summarize
from benchc.validate.schema import validate_settings

LONG_EXAMPLES = int(os.environ.get("BENCHC_FUZZ_EXAMPLES", "0") or 0)
# The profiles are applied by the decorators below, never loaded: the choice is this file's
# (BENCHC_FUZZ_EXAMPLES), not --hypothesis-profile's. `ci` replaces hypothesis' built-in profile
# of that name (also derandomized, no deadline, no example database), which hypothesis loads
# by itself on a CI machine; no other test here uses hypothesis. No database: nothing is written
# under .hypothesis/, and a failure prints what reproduces it.
_COMMON = dict(
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
settings.register_profile("ci", max_examples=250, derandomize=True, **_COMMON)
settings.register_profile("long", max_examples=max(LONG_EXAMPLES, 1), derandomize=False, **_COMMON)
PROFILE = settings.get_profile("long" if LONG_EXAMPLES else "ci")
CLI_EXAMPLES = max(LONG_EXAMPLES // 200, 25) if LONG_EXAMPLES else 8

SECONDS = 20  # per command as a subprocess (each starts Python and imports benchc)
IN_PROCESS_SECONDS = 10  # per example in process: plan, and compile twice (typically 0.1 s)
MEMORY = 1536 * 2**20  # address space a benchc command (or one in-process example) may add
MAX_COMPILED = 8  # points compiled per example: a sweep's points share every code path


def known_nasty(test):
    """Every input of KNOWN_NASTY as an @example of `test`."""
    for case in KNOWN_NASTY.values():
        test = example(case=case)(test)
    return test


# ---------------------------------------------------------------- a workspace per example


@contextmanager
def workspace(case: Case):
    """A temp folder holding the case's spec, the fragment the reference specs include and a
    second includable file, as a spec's folder does."""
    with tempfile.TemporaryDirectory(prefix="benchc-fuzz-") as folder:
        root = Path(folder)
        (root / FRAGMENT_NAME).parent.mkdir(parents=True)
        (root / FRAGMENT_NAME).write_bytes(case.fragment)
        (root / BASE_NAME).write_bytes(BASE)
        (root / "spec.bench").write_bytes(case.spec)
        yield root


class Hang(BaseException):  # not an Exception: no `except Exception` in benchc can swallow it
    pass


@contextmanager
def bounded(seconds: float = IN_PROCESS_SECONDS, memory: int = MEMORY):
    """Fail with Hang past `seconds` of this process's CPU time, and with MemoryError when its
    address space grows by more than `memory` bytes (Linux; elsewhere only the time is
    bounded). CPU time, not the clock's: a known-nasty input that plans in 1.2 s alone passed
    10 s of the clock in a loaded CI run on 2 cores, where nothing hung."""

    def alarm(signum, frame):
        raise Hang(f"still running after {seconds} s of CPU")

    previous_handler = signal.signal(signal.SIGPROF, alarm)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    limits = resource.getrlimit(resource.RLIMIT_AS)
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[0])
        ceiling = pages * resource.getpagesize() + memory
        if limits[1] == resource.RLIM_INFINITY or ceiling < limits[1]:
            resource.setrlimit(resource.RLIMIT_AS, (ceiling, limits[1]))
    except (OSError, ValueError):
        pass
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous_handler)
        resource.setrlimit(resource.RLIMIT_AS, limits)


# ---------------------------------------------------------------- what a located error is


def assert_located(diagnostic: Diagnostic) -> None:
    """The diagnostic points into a named source at a line and column that exist there."""
    assert diagnostic.message, diagnostic
    span = diagnostic.span
    assert span is not None, f"unlocated error: {diagnostic.message}"
    assert span.source.name, diagnostic
    lines = span.source.text.split("\n")
    assert 1 <= span.line <= len(lines), (span.line, len(lines), diagnostic.message)
    assert 1 <= span.column <= len(lines[span.line - 1]) + 1, (span.column, diagnostic.message)
    assert (span.end_line, span.end_column) >= (span.line, span.column), diagnostic
    for note in diagnostic.notes:
        assert note.span is None or note.span.line >= 1 and note.span.column >= 1, note


def assert_printable(diagnostics) -> None:
    """What the CLI prints for them can be written to a UTF-8 stream."""
    format_diagnostics(diagnostics, color=True).encode("utf-8")
    format_diagnostics(diagnostics, color=False).encode("utf-8")


def check_fmt(path: Path) -> None:
    """`benchc fmt` of the input: canonical text that formats to itself, or located errors;
    never a FormatError (a formatting that would change the meaning is a benchc bug)."""
    try:
        with bounded():
            source = read_source(path)
            text = format_source(source)
            assert format_source(Source(source.name, text)) == text, "formatting twice changed it"
    except BenchError as exc:
        for diagnostic in exc.diagnostics:
            assert_located(diagnostic)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- in process


# How the generated inputs (not the explicit @examples) of the property below ended.
OUTCOMES: Counter[str] = Counter()
EXPLICIT = set(KNOWN_NASTY.values())


@settings(PROFILE)
@known_nasty
@given(case=cases())
def front_end_and_compile_give_plans_or_located_errors(case: Case):
    generated = case not in EXPLICIT
    with workspace(case) as root:
        started = time.process_time()
        check_fmt(root / "spec.bench")
        try:
            with bounded():
                planned = plan_spec(
                    root / "spec.bench", targets=case.targets, overrides=case.overrides, smoke=case.smoke
                )
        except BenchError as exc:
            assert exc.diagnostics, "a BenchError with no diagnostic"
            for diagnostic in exc.diagnostics:
                assert_located(diagnostic)
            assert_printable(exc.diagnostics)
            OUTCOMES["errors"] += generated
            return
        assert planned.plans, "no plans and no error"
        OUTCOMES["plans"] += generated
        plans = planned.plans[:MAX_COMPILED]
        # what `check` and `plan` print, as they print it (stdout and stderr are UTF-8)
        payload = {"experiment": planned.document.experiment, "plans": [p.to_dict() for p in plans]}
        printed = [json.dumps(payload, indent=2, sort_keys=True), *map(summarize, plans), *planned.notes]
        "\n".join(printed).encode("utf-8")
        out = root / "build"
        try:
            with bounded():
                compile_plans(plans, out)
                first = snapshot(out)
                compile_plans(plans, out)
        except BenchError as exc:  # the build folder could not be written: not located in a spec
            assert_printable(exc.diagnostics)
            return
        assert first, "compile wrote nothing"
        assert snapshot(out) == first, "a second compile gave different bytes"
        assert time.process_time() - started < IN_PROCESS_SECONDS * 2


@pytest.fixture(scope="module")
def census_started():
    """The census' child process started and its libraries (torch, transformers, diffusers)
    imported before the bounded examples, so that their bound times planning, not one import
    that a busy machine makes slower than the bound (10 to 12 s of CPU on CI's cores)."""
    from checkpoint_helpers import FLUX
    from diffusers import FluxTransformer2DModel

    from benchc.plan.census import count_flux_afresh

    config = {k: v for k, v in FluxTransformer2DModel(**FLUX).config.items() if not k.startswith("_")}
    (counted,) = count_flux_afresh([config])
    assert counted["params"] > 0, counted


@pytest.mark.integration
def test_the_front_end_and_compile_give_plans_or_located_errors(census_started):
    OUTCOMES.clear()
    front_end_and_compile_give_plans_or_located_errors()
    # the fuzz reached both endings: inputs that plan and inputs that are refused
    assert OUTCOMES["plans"] > 0 and OUTCOMES["errors"] > 0, OUTCOMES


# What each known-nasty input must end as: an error saying this (None: plans).
EXPECTED = {
    "5000-digit integer": "integer 111111111111111111111111... (5000 characters) is too large",
    "100k-deep brackets": "nesting deeper than 64 levels",
    "100k-deep unclosed brackets": "nesting deeper than 64 levels",
    "300-character experiment name": "experiment name is 300 characters long",
    "5 sweeps of 100 values": "this spec expands to 10,000,000,000 points",
    "NUL byte": "NUL byte",
    "lone surrogate escape": "half of a surrogate pair",
    "lone surrogate in a reference": "half of a surrogate pair",
    "1e999": "number 1e999 is too large",
    "CRLF sd3.bench": None,
    "BOM sd3.bench": None,
    "BOM + CRLF sd3.bench": None,
    "CRLF fragment": None,
    "100k-character name": "unknown key",
    "--set targets=[[cpu]]": "--set targets takes a list of target names",
    "--set targets=[adamw(lr = 1)]": "--set targets takes a list of target names",
    "9,000 mixed targets": "targets[1] must be a string",
    "syntax error after a 100k-character name": "unexpected number '8'",
}


@pytest.mark.parametrize("name", list(KNOWN_NASTY))
def test_each_known_nasty_input_ends_as_it_should_and_fast(name: str):
    case = KNOWN_NASTY[name]
    with workspace(case) as root:
        started = time.process_time()
        try:
            with bounded():
                planned = plan_spec(root / "spec.bench", targets=case.targets, overrides=case.overrides,
                                    smoke=case.smoke)  # fmt: skip
        except BenchError as exc:
            assert EXPECTED[name] is not None, str(exc)
            assert EXPECTED[name] in exc.diagnostics[0].message, str(exc)
            assert_located(exc.diagnostics[0])
        else:
            assert EXPECTED[name] is None and planned.plans
        assert time.process_time() - started < 5


def _well_formed(test):
    for text in WELL_FORMED.values():
        test = example(text=text)(test)
    return test


@pytest.mark.integration
@settings(PROFILE, max_examples=max(PROFILE.max_examples // 10, 100))
@_well_formed
@given(text=spec_texts())
def test_specs_written_as_the_language_describes_load_and_pass_the_schema(text: str):
    """What the generator writes is valid syntax and settings (it may still break a rule
    between settings, such as a target's precision): a located error here is benchc's bug."""
    with workspace(Case(text.encode(), FRAGMENT)) as root:
        with bounded():
            document = load_document(root / "spec.bench")
            problems = validate_settings(document.values, document.span_of)
        assert not problems, format_diagnostics(problems)


# ---------------------------------------------------------------- through the command line

LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<column>\d+): (?:\x1b\[\d+m)?error:")


def _limit_memory() -> None:  # runs in the child, before benchc starts
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def benchc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [sys.executable, "-m", "benchc", *args],
            cwd=cwd,
            capture_output=True,
            timeout=SECONDS,
            preexec_fn=_limit_memory,
            env={**os.environ, "NO_COLOR": "1"},
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"benchc {' '.join(args)} still running after {SECONDS} s") from exc


def assert_user_error_or_success(proc: subprocess.CompletedProcess, command: str) -> None:
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode in (0, 2), f"{command}: exit {proc.returncode}\n{stderr[-3000:]}"
    assert "Traceback" not in stderr, f"{command}: {stderr[-3000:]}"
    assert "MemoryError" not in stderr, f"{command}: {stderr[-3000:]}"
    if proc.returncode == 0:
        return
    heads = [line for line in stderr.splitlines() if re.search(r"(^|: )error:", line)]
    assert heads, f"{command}: exit 2 with no error message: {stderr[-3000:]}"
    for head in heads:
        if re.match(r"^\s*\d* \|", head):  # a quoted spec line that says 'error:'
            continue
        match = LOCATED.match(head)
        assert match, f"{command}: unlocated error: {head}"
        assert int(match["line"]) >= 1 and int(match["column"]) >= 1, head


@pytest.mark.integration
@settings(PROFILE, max_examples=CLI_EXAMPLES)
@known_nasty
@given(case=cases())
def test_check_plan_and_compile_exit_0_or_2_with_a_location(case: Case):
    options = [f"--target={t}" for t in case.targets] + [f"--set={o}" for o in case.overrides]
    options += ["--smoke"] if case.smoke else []
    with workspace(case) as root:
        for command in (["check"], ["plan"], ["compile", "-o", str(root / "build")]):
            proc = benchc(*command, "spec.bench", *options, cwd=root)
            assert_user_error_or_success(proc, " ".join(command))
        for path in root.rglob("*"):  # compile wrote nowhere but its -o folder
            assert (
                path.name in ("spec.bench", BASE_NAME, "common", "build")
                or "build" in path.parts
                or (path == root / FRAGMENT_NAME)
            ), path
