"""Read a build point's manifest.json from disk as untrusted input: bounded (a regular file of
sane size and depth, results/untrusted_json.py), then checked and typed by compiler/manifest.py,
so an edited or damaged manifest is a located error naming the field, never a traceback halfway
through a run."""

from __future__ import annotations

from pathlib import Path

from ..diagnostics import Span, error
from ..manifest import NOT_A_MANIFEST, Manifest
from ..results.untrusted_json import read_json_file


def load_manifest(path: Path) -> Manifest:
    """The manifest at `path`, or a BenchError saying which field is wrong."""
    return _read(path)[1]


def read_manifest(path: Path) -> dict:
    """The manifest at `path` as JSON, checked as load_manifest checks it."""
    return _read(path)[0]


def _read(path: Path) -> tuple[dict, Manifest]:
    data, source = read_json_file(path, "build manifest")
    manifest = Manifest.from_json(data)
    if isinstance(manifest, Manifest):
        return data, manifest
    if manifest == NOT_A_MANIFEST:
        raise error(f"{path} {manifest}", Span.start_of(source),
                    hint="compile the spec again: benchc compile SPEC -o DIR")  # fmt: skip
    raise error(f"{path}: {manifest}", Span.start_of(source),
                hint="the manifest was edited or damaged; compile the spec again to rewrite it")  # fmt: skip
