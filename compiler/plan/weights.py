"""The spec's `weights` setting resolved: the folder's absolute path, checked, and the model's
shape taken from it.

A relative path is read from the folder of the file that wrote it (as includes are; from the
working folder for `--set`). The checkpoint's config gives every shape setting the spec left
to it (unwritten, or a default); a setting the spec wrote (or its preset gave) that differs
from the checkpoint is an error at that setting, so parameters, FLOPs, memory and MFU always
describe the model that will run.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..catalog.flux import transformer_config
from ..checkpoints.folder import NOT_THE_MODEL, Checkpoint, CheckpointError, read_checkpoint
from ..diagnostics import Diagnostic
from .census import CensusError, checkpoint_tensors, flux_checkpoint_tensors
from .variants import Settings


def resolve_weights(settings: Settings, kind: str, model: dict, preset: dict, problems: list) -> None:
    """Fill `model` (defaults, preset and written settings merged) from its weights folder, in
    place; the path becomes absolute. Problems are appended, located."""
    key = ("model", kind, "weights")
    at = settings.span(key)
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in str(model["weights"])):
        return  # validate.semantic's weights_path_printable says so, located
    try:
        path = _absolute(settings, key, str(model["weights"]))
    except (OSError, ValueError, RuntimeError) as exc:
        problems.append(Diagnostic(f"weights: cannot resolve the path: {exc}", at))
        return
    model["weights"] = path
    try:
        checkpoint = _read(path, kind)
    except CheckpointError as exc:
        problems.append(Diagnostic(f"weights: {exc.message}", at, hint=exc.hint))
        return
    unlike_preset = []
    for name, value in checkpoint.shape.items():
        if settings.has(("model", kind, name)):
            if model[name] != value:
                problems.append(
                    Diagnostic(
                        f"the spec sets {name} = {model[name]}, "
                        f"but the checkpoint's config gives {value} ({path})",
                        settings.span(("model", kind, name)),
                        hint=f"remove {name} and the checkpoint gives it, or name a checkpoint of this shape",
                    )
                )
        elif name in preset and preset[name] != value:
            unlike_preset.append(f"{name} {preset[name]} where the checkpoint has {value}")
        else:
            model[name] = value
    if checkpoint.model_type is not None:  # a causal LM: its family and its config's other keys
        if settings.has(("model", kind, "model_type")) and model.get("model_type") != checkpoint.model_type:
            problems.append(Diagnostic(
                f'model_type is "{model["model_type"]}", but the checkpoint is for "{checkpoint.model_type}" '
                f"({path})", settings.span(("model", kind, "model_type")),
                hint="remove model_type: the checkpoint gives it",
            ))  # fmt: skip
        model["model_type"] = checkpoint.model_type
        model["config_extra"] = dict(checkpoint.extra)
    if unlike_preset:
        problems.append(
            Diagnostic(
                f'preset "{model["preset"]}" is not the checkpoint\'s model: '
                f"{', '.join(unlike_preset)} ({path})",
                settings.span(("model", kind, "preset")),
                hint="remove the preset: the checkpoint gives the model's shape",
            )
        )
    if kind == "flux":  # a pipeline's folder, or one transformer's: what each workload needs
        model["pipeline_folder"] = checkpoint.kind == "flux_pipeline"
    if kind == "sd3" and "t5" in model["text_encoders"] and "text_encoder_3" not in checkpoint.parts:
        problems.append(
            Diagnostic(
                "weights: the pipeline was saved without its T5 encoder (text_encoder_3), but text_encoders "
                "names t5",
                at,
                hint="write text_encoders = [clip_l, clip_g], or name a pipeline saved with T5",
            )
        )


def smoke_note(path: str) -> str:
    return (
        f"--smoke keeps weights = {path}: the program checks it against the model the full run "
        "builds from it, then runs the tiny model with random weights"
    )


def _absolute(settings: Settings, key: tuple, written: str) -> str:
    """The path read from the folder of the file that wrote it (the working folder for --set)."""
    path = Path(written).expanduser()
    if not path.is_absolute():
        source = settings.span(key).source.name
        files = {f.path for f in settings.document.files}
        base = Path(source).parent if source in files else Path.cwd()
        path = base / path
    return str(Path(path).resolve())


def _expected_tensors(config: dict) -> dict:
    """A causal LM checkpoint's tensors, counted from the model its config builds."""
    model = {k: v for k, v in config.items() if k not in NOT_THE_MODEL or k == "model_type"}
    try:
        return checkpoint_tensors(model)
    except CensusError as exc:
        raise CheckpointError(str(exc)) from None


def _expected_flux_tensors(shape: dict) -> dict:
    """A Flux transformer checkpoint's tensors, counted from the model of that shape."""
    try:
        return flux_checkpoint_tensors(transformer_config(shape))
    except CensusError as exc:
        raise CheckpointError(str(exc)) from None


@lru_cache(maxsize=16)
def _read_cached(path: str, kind: str, stamp: tuple) -> Checkpoint | CheckpointError:
    try:
        expected = {"llama": _expected_tensors, "causal_lm": _expected_tensors,
                    "flux": _expected_flux_tensors}.get(kind)  # fmt: skip
        return read_checkpoint(path, kind, expected)
    except CheckpointError as exc:
        return exc


def _read(path: str, kind: str) -> Checkpoint:
    """Read once per command however many targets and sweep points name it (the modification
    times of the folder and of its configs key the cache, so a folder changed in between, a
    config rewritten in place included, is read again)."""
    stamp = []
    for name in ("", "config.json", "model_index.json", "transformer/config.json"):
        try:
            info = (Path(path) / name).stat()
            stamp.append((info.st_mtime_ns, info.st_ino, info.st_size))
        except OSError:
            stamp.append(None)
    stamp = tuple(stamp)
    found = _read_cached(path, kind, stamp)
    if isinstance(found, CheckpointError):
        raise found
    return found
