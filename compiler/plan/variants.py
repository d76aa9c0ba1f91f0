"""Expand a document into variants, one per (target, sweep point), each a located settings view.

Precedence, lowest first: included files < the spec < `on TARGET { }` < the sweep point <
`--set`. A `--set` of a swept key replaces that sweep (one point instead of several).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass, field

from ..diagnostics import BenchError, Source, Span, error
from ..frontend import syntax as ast
from ..frontend.document import Document, Origin, record_origins
from ..frontend.parser import parse_text
from ..records import frozen

MAX_POINT_CHARS = 120  # a point names a folder; the file system takes 255
UNNAMED = ("slurm",)  # where and how a job is queued: a --set of it does not name the point
UNSWEEPABLE = ("targets", "reference", "on", "description", "prices")


@frozen
class Override:
    """One `--set key=value` argument, parsed and located in its own little source."""

    path: tuple[str, ...]
    value: object
    node: ast.Value
    key_span: Span
    text: str


def parse_override(text: str, index: int = 1) -> Override:
    source = Source(f"--set[{index}]", text)
    if "=" not in text:
        raise error(
            f"--set needs KEY=VALUE, got '{text}'",
            Span(source, 1, 1, 1, max(2, len(text) + 1)),
            hint="e.g. --set train.batch=32",
        )
    tree = parse_text(source)
    statements = tree.statements
    if len(statements) != 1 or not isinstance(statements[0], ast.Assignment):
        raise error(
            "--set takes one KEY=VALUE",
            Span(source, 1, 1, 1, len(text) + 1),
            hint="e.g. --set train.batch=32 (repeat --set for more keys)",
        )
    assignment = statements[0]
    if assignment.key.parts[0] in ("on", "reference", "description"):
        raise error(
            f"--set cannot change '{assignment.key.parts[0]}'",
            assignment.key.span,
            hint="--set changes settings such as train.batch; combine it with --target for one target",
        )
    if assignment.key.parts == ("targets",):
        if not isinstance(assignment.value, ast.ListValue):
            raise error("--set targets takes a list, e.g. targets=[h100]", assignment.value.span)
        for item in assignment.value.items:
            if not isinstance(item, (ast.Name, ast.String)):  # a list or a call: unhashable
                raise error(
                    "--set targets takes a list of target names",
                    item.span,
                    hint="e.g. --set targets=[h100, cpu] (`benchc targets` lists them)",
                )
    return Override(
        assignment.key.parts, ast.plain(assignment.value), assignment.value, assignment.key.span,
        text,
    )  # fmt: skip


@dataclass
class Settings:
    """The raw settings of one variant and where each came from."""

    document: Document
    values: dict
    overlay: dict[tuple, Origin] = field(default_factory=dict)

    def span(self, path: tuple, prefer_key: bool = False) -> Span:
        for cut in range(len(path), 0, -1):
            prefix = tuple(path[:cut])
            origin = self.overlay.get(prefix) or self.document.origins.get(prefix)
            if origin is not None:
                if cut == len(path):
                    return origin.key_span if prefer_key and origin.key_span else origin.value_span
                return origin.key_span or origin.value_span
        return self.document.experiment_span

    def get(self, path: tuple, default=None):
        node = self.values
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def has(self, path: tuple) -> bool:
        sentinel = object()
        return self.get(path, sentinel) is not sentinel

    def set(self, path: tuple, value, origin: Origin | None = None, key_span: Span | None = None) -> None:
        node = self.values
        for depth, part in enumerate(path[:-1]):
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
                anchor = key_span or (origin.key_span if origin else None)
                if anchor is not None:  # a block this setting created: point at its key
                    self.overlay[path[: depth + 1]] = Origin(anchor, anchor)
            node = child
        node[path[-1]] = copy.deepcopy(value)
        for known in [p for p in self.overlay if p[: len(path)] == path]:
            del self.overlay[known]
        if origin is not None:
            self.overlay[path] = origin

    def merge(self, block_path: tuple, path: tuple, value) -> None:
        """Deep-merge the settings of the document's block at `block_path` (an `on TARGET`)."""
        if isinstance(value, dict) and not _is_call(value):
            for key, inner in value.items():
                self.merge(block_path, path + (key,), inner)
            return
        source_path = block_path + path
        self.set(path, value, self.document.origins.get(source_path))
        for known, origin in self.document.origins.items():
            if known[: len(source_path)] == source_path and len(known) > len(source_path):
                self.overlay[path + known[len(source_path) :]] = origin


def _is_call(value) -> bool:
    return isinstance(value, dict) and set(value) == {"fn", "args"}


@frozen
class Variant:
    target: str
    point: str
    point_values: tuple[tuple[str, object], ...]
    settings: Settings


MAX_POINTS = 10_000  # variants (targets x sweep points) a spec may expand to; --max-points raises it


def expand(
    document: Document, targets: list[str], overrides: list[Override], max_points: int = MAX_POINTS
) -> list[Variant]:
    """Every (target, sweep point) of the document, with overrides applied. The number of
    variants is computed before any is built, and refused past `max_points`."""
    set_paths = {o.path for o in overrides}
    axes = [axis for path, axis in document.sweeps.items() if path not in set_paths]
    for axis in axes:
        if axis.path[0] in UNSWEEPABLE:
            raise error(
                f"'{'.'.join(axis.path)}' cannot be swept",
                axis.key_span,
                hint="sweep a setting such as train.batch or cluster.nodes; list targets in targets = [...]",
            )
        _refuse_repeated_values(axis)
    count = len(targets) * math.prod(len(axis.values) for axis in axes)
    if count > max_points:
        sizes = " x ".join(str(len(axis.values)) for axis in axes)
        raise error(
            f"this spec expands to {count:,} points ({len(targets)} target"
            f"{'s' if len(targets) != 1 else ''} x sweeps of {sizes}); the limit is {max_points:,}",
            axes[0].key_span if axes else document.experiment_span,
            hint="sweep fewer values, or raise the limit with --max-points N if you mean it",
        )
    points = list(itertools.product(*[range(len(axis.values)) for axis in axes]))
    names = [_point_name(axes, choice) for choice in points]
    if len(set(names)) != len(names):
        names = [f"{name}-{i}" for i, name in enumerate(names)]
    named = _named_overrides(document, overrides)
    variants = []
    for target in targets:
        for choice, name in zip(points, names):
            settings = Settings(document, copy.deepcopy(document.values))
            on_block = document.get(("on", target))
            if isinstance(on_block, dict):
                settings.merge(("on", target), (), on_block)
            for axis, index in zip(axes, choice):
                settings.set(axis.path, axis.values[index], Origin(axis.key_span, axis.value_spans[index]))
            for override in overrides:
                settings.set(override.path, override.value, key_span=override.key_span)
                record_origins(settings.overlay, override.path, override.node, override.key_span)
            values = tuple((".".join(axis.path), axis.values[index]) for axis, index in zip(axes, choice))
            point, values = _with_set_values(name, values, named)
            point, values = _with_named_settings(point, values, settings)
            variants.append(Variant(target, point, values, settings))
    return variants


# Settings that change how a point runs, not what it computes: a value other than the
# default, set otherwise than by a sweep (the spec, `on`, --set), is carried in the point's
# name and values, so a report sets it beside the same point under the default and their
# builds and results never take each other's place.
NAMED_SETTINGS = (("runtime", "torch"), ("optimize", "tuned"))


def _refuse_repeated_values(axis) -> None:
    """A sweep that lists a value twice would build and run the same point twice."""
    seen = {}
    for index, value in enumerate(axis.values):
        key = json.dumps(value, sort_keys=True, default=str)
        if key in seen:
            raise error(
                f"sweep {'.'.join(axis.path)} lists {json.dumps(value, default=str)} twice "
                f"(values {seen[key] + 1} and {index + 1})",
                axis.value_spans[index],
                hint="list each value once",
            )
        seen[key] = index


def _with_named_settings(name: str, values: tuple, settings: Settings) -> tuple[str, tuple]:
    for key, default in NAMED_SETTINGS:
        value = settings.get((key,), default)
        if value == default or any(k == key for k, _ in values):
            continue
        suffix = f"{key}-{value}"
        name = suffix if name == "default" else f"{name}_{suffix}"
        values = values + ((key, value),)
    return name, values


def _named_overrides(document: Document, overrides: list[Override]) -> list[Override]:
    """The --set arguments that name the point: each that gives a value other than the spec's
    own (its includes counted, `on TARGET` not, so every target's point has the same name),
    the last of several for one key, a swept key's first. What cannot be swept (targets,
    prices) and where a job is queued (slurm) name nothing; `runtime` and `optimize` absent
    from the spec are compared with their defaults."""
    defaults = dict(NAMED_SETTINGS)
    last = {o.path: o for o in overrides if o.path[0] not in (*UNSWEEPABLE, *UNNAMED)}
    named = []
    for path, override in last.items():
        spec_value = document.get(path)
        if spec_value is None and len(path) == 1:
            spec_value = defaults.get(path[0])
        if path in document.sweeps or _key(spec_value) != _key(override.value):
            named.append(override)
    # a swept key's value first, in the sweeps' order, as the sweep's own points are named
    sweeps = list(document.sweeps)
    return sorted(named, key=lambda o: sweeps.index(o.path) if o.path in sweeps else len(sweeps))


def _key(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _with_set_values(name: str, values: tuple, named: list[Override]) -> tuple[str, tuple]:
    """A point's name and values with the --set values that name it: `precision-bf16`, or
    `batch-16_precision-bf16` on a sweep's point, never `default`."""
    if not named:
        return name, values
    parts = [] if name == "default" else [name]
    parts += [f"{o.path[-1]}-{_shown(o.value)}" for o in named]
    return _short("_".join(parts)), values + tuple((".".join(o.path), o.value) for o in named)


def _shown(value) -> str:
    if isinstance(value, bool):
        shown = str(value).lower()
    elif _is_call(value):
        shown = value["fn"]
    else:
        shown = str(value)
    return re.sub(r"[^A-Za-z0-9.+-]", "_", shown)


def _short(name: str) -> str:
    """A folder name: at most MAX_POINT_CHARS, and still unique."""
    if len(name) > MAX_POINT_CHARS:
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        name = f"{name[: MAX_POINT_CHARS - 11]}-{digest}"
    return name


def _point_name(axes, choice) -> str:
    if not axes:
        return "default"
    parts = (f"{axis.path[-1]}-{_shown(axis.values[index])}" for axis, index in zip(axes, choice))
    return _short("_".join(parts))


def raise_if(diagnostics) -> None:
    if diagnostics:
        raise BenchError(diagnostics)
