"""Load a spec with its includes into one settings document: nested plain values plus their spans.

The document is what the JSON Schema validates and what lowering reads. Every value in it has an
`Origin` (the key and value spans that set it), so any later error points at the user's text.
Rules enforced here: one experiment per file; a key is set once per file; an included file is a
base that the including file overrides; includes resolve relative to the including file; include
cycles and missing includes are reported with the include chain; a file included more than once
is read and applied once, at its first include; an include must name a `.bench` file inside the
include root (by default the folder of the spec; `--include-root` widens it).
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..diagnostics import BenchError, Diagnostic, Note, Source, Span, did_you_mean, error
from ..records import frozen
from . import syntax as ast
from .parser import parse_text
from .source import display_name, read_source

Path_ = tuple  # a settings path such as ("train", "batch") or ("targets", 1)

MAX_INCLUDE_DEPTH = 16
MAX_PATH_CHARS, MAX_NAME_CHARS = 4096, 255  # what Linux accepts for a path and one of its parts


@frozen
class Origin:
    key_span: Span | None  # the key (or block name) that set the value
    value_span: Span  # the value itself (or the whole block)


@frozen
class SweepAxis:
    path: tuple[str, ...]
    values: tuple[object, ...]
    value_spans: tuple[Span, ...]
    key_span: Span


@frozen
class SpecFile:
    path: str
    sha256: str


@dataclass
class Document:
    """A spec's settings after includes, before defaults: what the user wrote, located."""

    experiment: str
    experiment_span: Span
    values: dict = field(default_factory=dict)
    origins: dict[Path_, Origin] = field(default_factory=dict)
    sweeps: dict[tuple[str, ...], SweepAxis] = field(default_factory=dict)
    files: list[SpecFile] = field(default_factory=list)
    main: Source | None = None

    def span_of(self, path: Path_, prefer_key: bool = False) -> Span:
        """The span that best shows `path`: its own, or that of its nearest written ancestor."""
        for cut in range(len(path), 0, -1):
            origin = self.origins.get(tuple(path[:cut]))
            if origin is not None:
                if prefer_key and cut == len(path) and origin.key_span is not None:
                    return origin.key_span
                return origin.value_span if cut == len(path) else (origin.key_span or origin.value_span)
        return self.experiment_span

    def get(self, path: Path_, default=None):
        node = self.values
        for part in path:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
            else:
                return default
        return node


def load_document(path: Path | str, include_root: Path | str | None = None) -> Document:
    """Read, parse and merge a spec and everything it includes (all under `include_root`,
    by default the spec's own folder)."""
    path = Path(path)
    source = read_source(path, name=str(path))
    tree = parse_text(source)
    experiments = tree.experiments
    if not experiments:
        raise _no_experiment(tree)
    if len(experiments) > 1:
        raise error(
            f"more than one experiment in '{source.name}'",
            experiments[1].name_span,
            hint='write one experiment per file; share settings with include "base.bench"',
            notes=(Note("the first experiment is here", experiments[0].name_span),),
        )
    loose = tree.loose_entries
    if loose:
        raise error(
            "settings outside the experiment block",
            _head_span(loose[0]),
            hint=f"move them inside `experiment {experiments[0].name} {{ ... }}`, "
            "or into a file that this one includes",
        )
    experiment = experiments[0]
    root = Path(include_root) if include_root is not None else path.parent
    builder = _Builder(Document(experiment.name, experiment.name_span, main=source), root.resolve())
    builder.add_file(path, tree, experiment.body, chain=())
    return builder.document


def _include_target(including: Path, include: ast.Include, notes: tuple) -> Path:
    """The file an include names, resolved; refuses paths no file system would take."""
    written, span = include.path.value, include.path.span
    if "\x00" in written:
        raise error("include path holds a NUL character", span, notes=notes)
    if len(written) > MAX_PATH_CHARS or any(len(part) > MAX_NAME_CHARS for part in written.split("/")):
        raise error(
            f"include path is too long ({len(written):,} characters)",
            span,
            hint=f"paths are at most {MAX_PATH_CHARS} characters, each part at most {MAX_NAME_CHARS}",
            notes=notes,
        )
    try:
        return (including.parent / written).resolve()
    except RuntimeError:  # Python 3.11: "Symlink loop from ..."
        raise error(f"include '{written}' is a symlink loop", span, notes=notes) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(f"include '{written}' is a symlink loop", span, notes=notes) from None
        raise error(f"cannot resolve include '{written}': {exc.strerror}", span, notes=notes) from None


def _check_included_file(target: Path, include: ast.Include, root: Path, notes: tuple) -> None:
    """An include reads a regular `.bench` file under the include root, or nothing at all."""
    written, span = include.path.value, include.path.span
    try:
        info = os.stat(target)
    except FileNotFoundError:
        raise error(
            f"included file not found: '{written}'",
            span,
            hint=f"looked for {display_name(target)} (include paths are relative to the including file)",
            notes=notes,
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(f"include '{written}' is a symlink loop", span, notes=notes) from None
        raise error(f"cannot read include '{written}': {exc.strerror}", span, notes=notes) from None
    if stat.S_ISDIR(info.st_mode):
        raise error(f"include '{written}' is a directory, not a .bench file", span, notes=notes)
    if not stat.S_ISREG(info.st_mode):
        raise error(
            f"include '{written}' is not a regular file (a FIFO, socket or device)",
            span,
            hint="an include names a .bench file on disk",
            notes=notes,
        )
    if not target.is_relative_to(root):
        raise error(
            f"included file '{written}' is outside the folder of the spec ({display_name(root)})",
            span,
            hint=f"it resolves to {display_name(target)}; pass --include-root FOLDER to allow "
            "includes from under FOLDER",
            notes=notes,
        )
    if target.suffix != ".bench":
        raise error(
            f"include '{written}' does not name a .bench file",
            span,
            hint="an include reads shared settings from another .bench file",
            notes=notes,
        )


def _no_experiment(tree: ast.File) -> BenchError:
    source = tree.source
    if not tree.statements:
        return error(
            "empty spec: no experiment",
            Span.start_of(source),
            hint="a spec needs `experiment NAME { model ... { } train { } targets = [...] }`",
        )
    first = tree.statements[0]
    if isinstance(first, ast.Block):
        guess = did_you_mean(first.name, ("experiment", "include"))
        if guess:
            return error(f"unknown keyword '{first.name}'", first.name_span, hint=guess)
    return error(
        f"no experiment in '{source.name}'",
        _head_span(tree.statements[0]),
        hint="a spec needs `experiment NAME { ... }`; a file of bare settings can only be "
        "included by one that has it",
    )


def _head_span(statement) -> Span:
    if isinstance(statement, ast.Block):
        return statement.name_span
    if isinstance(statement, (ast.Assignment, ast.Sweep)):
        return statement.key.span
    return statement.span


class _Builder:
    def __init__(self, document: Document, include_root: Path):
        self.document = document
        self.include_root = include_root
        self.applied: set[Path] = set()  # files already read: a diamond is read once
        self.passes = itertools.count()
        self.set_in: dict[Path_, tuple[int, Span]] = {}  # path -> (pass, key span) that set it
        self.sweep_set_in: dict[tuple[str, ...], tuple[int, Span]] = {}

    # -- files and includes

    def add_file(self, path: Path, tree: ast.File, entries, chain: tuple) -> None:
        text = tree.source.text.encode("utf-8")
        self.document.files.append(SpecFile(tree.source.name, hashlib.sha256(text).hexdigest()))
        resolved = path.resolve()
        self.applied.add(resolved)
        for include in tree.includes:
            self.add_include(resolved, include, chain + ((resolved, include),))
        pass_id = next(self.passes)
        errors: list[Diagnostic] = []
        for entry in entries:
            try:
                self.add_entry(entry, (), pass_id)
            except BenchError as exc:
                errors.extend(exc.diagnostics)
        if errors:
            raise BenchError(errors)

    def add_include(self, including: Path, include: ast.Include, chain: tuple) -> None:
        notes = tuple(
            Note(f"included from here ({display_name(p)})", inc.span) for p, inc in reversed(chain[:-1])
        )
        target = _include_target(including, include, notes)
        if target in {p for p, _ in chain}:
            cycle = " -> ".join([display_name(p) for p, _ in chain] + [display_name(target)])
            raise error(
                f"include cycle: {cycle}",
                include.path.span,
                hint="an included file must not include, directly or not, a file that includes it",
                notes=notes,
            )
        if len(chain) > MAX_INCLUDE_DEPTH:
            raise error(f"includes nested deeper than {MAX_INCLUDE_DEPTH}", include.span, notes=notes)
        if target in self.applied:
            return  # already read and applied where it was first included
        _check_included_file(target, include, self.include_root, notes)
        source = read_source(target, included_from=include.path.span)
        tree = parse_text(source)
        if tree.experiments:
            raise error(
                f"included file '{source.name}' declares an experiment",
                tree.experiments[0].name_span,
                hint="an included file holds shared settings only; remove its experiment block "
                "and keep the settings bare",
                notes=(Note("included from here", include.path.span),) + notes,
            )
        self.add_file(target, tree, tree.loose_entries, chain)

    # -- entries

    def add_entry(self, entry, prefix: Path_, pass_id: int) -> None:
        if isinstance(entry, ast.Assignment):
            path = prefix + entry.key.parts
            was_value = path in self.set_in  # a call (`adamw(...)`) is a value, though held as a dict
            self._claim(path, entry.key.span, pass_id, entry.key.dotted)
            self._make_parents(path[:-1], entry.key.span)
            parent = self._node(path[:-1])
            existing = parent.get(path[-1])
            if isinstance(existing, dict) and not was_value:
                raise error(
                    f"'{'.'.join(path)}' is a block; it cannot also be set to a value",
                    entry.key.span,
                )
            if path in self.document.origins:  # an override of an included file's value
                self._drop_origins(path, existing)
            swept = self.sweep_set_in.get(path)
            if swept is not None and swept[0] != pass_id:  # an included file's sweep of this key
                del self.document.sweeps[path]  # the including file's own value wins
                del self.sweep_set_in[path]
            parent[path[-1]] = ast.plain(entry.value)
            record_origins(self.document.origins, path, entry.value, entry.key.span)
        elif isinstance(entry, ast.Block):
            path = prefix + (entry.name,)
            self._make_parents(path, entry.name_span, block=entry)
            if entry.label is not None:
                path = path + (entry.label,)
                self._make_parents(path, entry.label_span, block=entry)
            for inner in entry.body:
                self.add_entry(inner, path, pass_id)
        elif isinstance(entry, ast.Sweep):
            path = prefix + entry.key.parts
            previous = self.sweep_set_in.get(path)
            if previous is not None and previous[0] == pass_id:
                raise error(
                    f"duplicate sweep of '{entry.key.dotted}'",
                    entry.key.span,
                    notes=(Note("first swept here", previous[1]),),
                    hint="list all values in one sweep",
                )
            self.sweep_set_in[path] = (pass_id, entry.key.span)
            if not entry.values.items:
                raise error("a sweep needs at least one value", entry.values.span)
            self.document.sweeps[path] = SweepAxis(
                path,
                tuple(ast.plain(v) for v in entry.values.items),
                tuple(v.span for v in entry.values.items),
                entry.key.span,
            )

    def _claim(self, path: Path_, span: Span, pass_id: int, shown: str) -> None:
        previous = self.set_in.get(path)
        if previous is not None and previous[0] == pass_id:
            raise error(
                f"duplicate key '{'.'.join(map(str, path))}'",
                span,
                notes=(Note("first set here", previous[1]),),
                hint="set each key once per file (an including file may override an included one)",
            )
        self.set_in[path] = (pass_id, span)

    def _make_parents(self, path: Path_, span: Span, block: ast.Block | None = None) -> None:
        node = self.document.values
        for depth, part in enumerate(path):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
                here = path[: depth + 1]
                value_span = block.span if block is not None else span
                self.document.origins[here] = Origin(span, value_span)
            elif not isinstance(child, dict) or path[: depth + 1] in self.set_in:  # or a call
                raise error(
                    f"'{'.'.join(path[: depth + 1])}' is a value; it cannot also be a block",
                    span,
                    notes=(Note("set here", self.document.span_of(path[: depth + 1])),),
                    hint="a call such as adamw(lr = 1e-4) is one value: set it again whole, "
                    f"e.g. {'.'.join(path[: depth + 1])} = adamw(lr = 3e-4)"
                    if isinstance(child, dict)
                    else None,
                )
            node = child

    def _node(self, path: Path_) -> dict:
        node = self.document.values
        for part in path:
            node = node[part]
        return node

    def _drop_origins(self, path: Path_, old_value) -> None:
        """An override replaces a whole value: forget the spans of the value it replaces (the
        value's own items and arguments, found by walking it: linear in its size)."""
        origins = self.document.origins
        stack = [(path, old_value)]
        while stack:
            here, value = stack.pop()
            origins.pop(here, None)
            if isinstance(value, dict):
                stack.extend((here + (key,), item) for key, item in value.items())
            elif isinstance(value, list):
                stack.extend((here + (index,), item) for index, item in enumerate(value))


def record_origins(origins: dict, path: Path_, value: ast.Value, key_span: Span | None) -> None:
    """Remember where `value` (and each item or argument inside it) was written."""
    origins[path] = Origin(key_span, value.span)
    if isinstance(value, ast.ListValue):
        for index, item in enumerate(value.items):
            record_origins(origins, path + (index,), item, None)
    elif isinstance(value, ast.Call):
        origins[path + ("fn",)] = Origin(None, value.name_span)
        origins[path + ("args",)] = Origin(value.name_span, value.span)
        for argument in value.arguments:
            record_origins(origins, path + ("args", argument.name), argument.value, argument.name_span)
