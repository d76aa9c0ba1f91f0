"""Helpers for code-generation tests: plan a spec and render or compile it."""

from __future__ import annotations

from pathlib import Path

from benchc.codegen.programs import render_point
from benchc.pipeline import plan_spec

from conftest import SPECS

S1 = SPECS / "sd3.bench"


def s1_files(target: str, smoke: bool = False, overrides=(), point: str = "batch-16") -> dict:
    plans = plan_spec(S1, targets=[target], overrides=list(overrides), smoke=smoke).plans
    plan = next(p for p in plans if p.point == point) if len(plans) > 1 else plans[0]
    return render_point(plan)


def core_text(program: str) -> str:
    start = program.index("# ==== benchc: device-neutral core")
    end = program.index("# ==== benchc: end of device-neutral core ====")
    return program[start:end]


def write_program(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path
