"""Helpers for code-generation tests: plan a spec and render or compile it."""

from __future__ import annotations

import ast
import contextlib
import os
from pathlib import Path

from benchc.codegen.points import render_point
from benchc.pipeline import plan_spec

from helpers import REPO

S1 = Path("specs/sd3.bench")  # relative, as a user types it: the path is part of the output


@contextlib.contextmanager
def in_repo():
    previous = os.getcwd()
    os.chdir(REPO)
    try:
        yield
    finally:
        os.chdir(previous)


def s1_files(target: str, smoke: bool = False, overrides=(), point: str = "batch-16") -> dict:
    with in_repo():
        plans = plan_spec(S1, targets=[target], overrides=list(overrides), smoke=smoke).plans
    # a --set that changes a value names the point after the sweep's part: batch-16_precision-fp16
    plan = next(p for p in plans if p.point.split("_")[0] == point) if len(plans) > 1 else plans[0]
    return render_point(plan)


def spec_files(spec: str, target: str, smoke: bool = False, overrides=()) -> dict:
    """The files of a spec's first point for one target."""
    with in_repo():
        plans = plan_spec(
            Path("specs") / spec, targets=[target], overrides=list(overrides), smoke=smoke
        ).plans
    return render_point(plans[0])


def core_text(program: str) -> str:
    start = program.index("# ==== benchc: device-neutral core")
    end = program.index("# ==== benchc: end of device-neutral core ====")
    return program[start:end]


def write_program(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def plan_literal(program: str) -> dict:
    """The PLAN literal of a generated program, as a dict."""
    for node in ast.parse(program).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PLAN":
            return ast.literal_eval(node.value)
    raise AssertionError("no PLAN")


def spec_points(spec: str, target: str, smoke: bool = False) -> list[dict]:
    """The files of every point of a spec for one target."""
    with in_repo():
        plans = plan_spec(Path("specs") / spec, targets=[target], smoke=smoke).plans
    return [render_point(plan) for plan in plans]
