"""The build manifest of a metrics file being ingested: found beside it (or two folders up, as
`benchc run` lays runs out), checked against the manifest's schema as `run` checks it, and
matched to the file's experiment and target. Its plan gives the stored run its roofline,
published references and prices; the metrics alone are enough to store the run, so a manifest
that is missing, unreadable, invalid or of another point is not an error: the run is stored
without a plan, with the reason (shown by `ingest`, and by `report` where it misses the plan)."""

from __future__ import annotations

from pathlib import Path

from ..diagnostics import BenchError
from ..manifest import Manifest
from ..records import frozen
from .untrusted_json import read_json_file

HOW_TO_GIVE_ONE = ("to keep its plan, ingest a metrics file with its build point's manifest.json beside it "
                   "(or two folders up, as `benchc run` lays runs out)")  # fmt: skip


@frozen
class Build:
    """What an ingested run keeps of its build: its manifest, or why it has none."""

    manifest: Manifest | None
    no_plan: str | None  # why there is no plan; None where there is one

    @property
    def plan(self) -> dict | None:
        return self.manifest.plan.raw if self.manifest else None

    @property
    def spec_path(self) -> str | None:
        return self.manifest.spec_path if self.manifest else None


def _candidates(path: Path) -> tuple[Path, Path]:
    """Beside the file, and two folders up (absolute: two folders up from `metrics.json` is not '.')."""
    folder = path.absolute().parent
    return folder / "manifest.json", folder.parent.parent / "manifest.json"


def manifest_near(path: Path, metrics: dict, read: dict | None = None) -> Build:
    """The plan of the build that wrote the metrics file at `path`, or why it has none. `read`:
    manifests already read and checked by this command (the trials of a job share one)."""
    found = next((candidate for candidate in _candidates(path) if candidate.exists()), None)
    if found is None:
        beside, above = _candidates(path)
        return Build(None, f"no build manifest was found when its metrics were ingested, neither "
                           f"'{beside}' nor '{above}'; {HOW_TO_GIVE_ONE}")  # fmt: skip
    read = {} if read is None else read
    if found not in read:
        read[found] = _checked(found)
    manifest, refusal = read[found]
    if refusal:
        return Build(None, refusal)
    # experiment and target only: the metrics name their own point
    if (manifest.experiment, manifest.target) != (metrics["experiment"], metrics["target"]):
        theirs = f"{manifest.experiment} / {manifest.target}"
        return Build(None, f"the build manifest '{found}' is of {ascii(theirs)}, not of this run")
    return Build(manifest, None)


def _checked(found: Path) -> tuple[Manifest | None, str | None]:
    """(the manifest, None), or (None, why it cannot give its plan)."""
    try:
        data, _ = read_json_file(found, "build manifest")
    except BenchError as exc:
        reason = exc.diagnostics[0].message[:200]
        return None, f"its build manifest '{found}' could not be read at ingest ({reason})"
    manifest = Manifest.from_json(data)
    if isinstance(manifest, str):
        return None, f"its build manifest '{found}' was refused at ingest ({manifest})"
    return manifest, None
