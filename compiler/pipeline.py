"""The front end as one call: spec path (+ targets, --set, --smoke) -> validated, typed plans.

This is what `benchc check`, `benchc plan` and (later) `benchc compile` share. It never imports
torch. Every user mistake comes out as a BenchError holding all the diagnostics found.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .catalog.targets import TARGETS
from .diagnostics import BenchError, Diagnostic, Source, Span, choices_hint
from .frontend.document import Document, load_document
from .plan.lower import build, resolve
from .plan.smoke import shrink
from .plan.types import Plan
from .plan.variants import MAX_POINTS, Override, expand, parse_override
from .plan.weights import smoke_note
from .records import frozen
from .validate.fits import check_fits, refuse_whole_loading, smoke_advice
from .validate.schema import validate_settings
from .validate.semantic import check_names, check_plan


@frozen
class PlanSet:
    document: Document
    targets: tuple[str, ...]
    plans: tuple[Plan, ...]
    notes: tuple[str, ...] = ()  # what the user should know: settings --smoke replaced
    warnings: tuple[Diagnostic, ...] = ()  # located, severity "warning": points that will not fit

    @property
    def points(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(plan.point for plan in self.plans))


def parse_targets(names: Sequence[str]) -> list[str]:
    problems = []
    for index, name in enumerate(names, 1):
        if name not in TARGETS:
            source = Source(f"--target[{index}]", name)
            problems.append(
                Diagnostic(
                    f"unknown target '{name}'",
                    Span(source, 1, 1, 1, len(name) + 1),
                    hint=choices_hint(name, TARGETS, "known targets"),
                )
            )
    if problems:
        raise BenchError(problems)
    return list(dict.fromkeys(names))


def parse_overrides(texts: Sequence[str]) -> list[Override]:
    overrides, problems = [], []
    for index, text in enumerate(texts, 1):
        try:
            overrides.append(parse_override(text, index))
        except BenchError as exc:
            problems.extend(exc.diagnostics)
    if problems:
        raise BenchError(problems)
    return overrides


def plan_spec(
    path: Path | str,
    targets: Sequence[str] = (),
    overrides: Sequence[str] = (),
    smoke: bool = False,
    include_root: Path | str | None = None,
    max_points: int = MAX_POINTS,
) -> PlanSet:
    """Load, validate and lower a spec into one Plan per (target, sweep point); includes must
    lie under `include_root` (default: the spec's folder), and at most `max_points` plans."""
    chosen = parse_targets(targets)
    parsed = parse_overrides(overrides)
    document = load_document(path, include_root)
    problems = validate_settings(document.values, document.span_of)
    problems += check_names(document)
    if problems:
        raise BenchError(problems)
    set_targets = [o for o in parsed if o.path == ("targets",)]
    if set_targets:  # --set targets=[...] replaces the spec's list
        listed = set_targets[-1].value
        if not listed:
            raise BenchError([Diagnostic("targets must have at least 1 item, not 0",
                                         set_targets[-1].node.span,
                                         hint="name a target, e.g. --set targets=[cpu]")])  # fmt: skip
        problems = [
            Diagnostic(f"unknown target '{name}'", item.span,
                       hint=choices_hint(str(name), TARGETS, "known targets"))
            for name, item in zip(listed, set_targets[-1].node.items)
            if name not in TARGETS
        ]  # fmt: skip
        if problems:
            raise BenchError(problems)
    if not chosen:
        spec_targets = set_targets[-1].value if set_targets else document.get(("targets",))
        chosen = ["cpu"] if smoke else list(spec_targets)
    plans, notes, warnings = [], [], []
    for variant in expand(document, chosen, parsed, max_points):
        settings = variant.settings
        found = validate_settings(settings.values, settings.span, checked=document.values)
        if found:
            problems += found
            continue
        try:
            resolved = resolve(settings)
            target = TARGETS[variant.target]
            plan = build(resolved, variant, target, False, tuple(overrides))
            found = check_plan(plan, resolved)
            if not smoke:
                found += refuse_whole_loading(plan, resolved)
            if smoke and not found:
                accum = getattr(plan.workload, "grad_accum", 1)
                shrunk = shrink(resolved, real_grad_accum=accum)
                notes.extend(smoke_replaced(parsed, shrunk))
                resolved = shrunk
                plan = build(resolved, variant, target, True, tuple(overrides))
                found = check_plan(plan, resolved)
                if plan.checkpoint is not None:
                    notes.append(smoke_note(plan.checkpoint))
        except BenchError as exc:
            found = list(exc.diagnostics)
        problems += found
        if not found:
            plans.append(plan)
            warnings += check_fits(plan, resolved)
            advice = smoke_advice(plan)
            if advice:
                notes.append(advice)
    if problems:
        raise BenchError(problems)
    return PlanSet(document, tuple(chosen), tuple(plans), tuple(dict.fromkeys(notes)), tuple(warnings))


_SECTIONS = {"train": "workload", "infer": "workload", "model": "model", "cluster": "cluster",
             "parallel": "parallel", "measure": "measure"}  # fmt: skip


def smoke_replaced(overrides: Sequence[Override], shrunk) -> list[str]:
    """A note for each --set whose value the smoke shrink replaced."""
    found = []
    for override in overrides:
        section = _SECTIONS.get(override.path[0])
        if section is None or len(override.path) != 2:
            continue
        values = getattr(shrunk, section)
        key = override.path[1]
        if key in values and values[key] != override.value:
            found.append(f"--smoke replaced --set {override.text}: the smoke run uses "
                         f"{'.'.join(override.path)} = {values[key]}")  # fmt: skip
    return found
