"""A spec's causal LM (`model causal_lm` or `model llama`) resolved and built.

resolve_causal_lm: the family (`model_type`) from the spec, its preset or its `config` folder;
the folder's config.json read into settings (a setting the spec writes overrides it) and
extras (rope_scaling, norm epsilon...); every setting held to what its family has.
build_causal_lm: the typed CausalLM, its shape read back from the model transformers builds
from that config, counted on the meta device (plan/census.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..catalog.causal_lm import FAMILIES, FAMILY_KEYS, config_keys, transformers_config
from ..checkpoints.folder import CheckpointError, causal_lm_settings
from ..diagnostics import BenchError, Diagnostic, Span, choices_hint
from ..files import read_bounded
from .census import canonical, census_of, counted_or_located
from .types import CausalLM
from .variants import Settings

CONFIG_LIMIT = 1 * 2**20
FAMILY_ONLY = ("experts", "experts_per_token", "sliding_window")


def _families_hint(found: str | None = None) -> str:
    listed = ", ".join(FAMILIES)
    if found:
        return choices_hint(found, FAMILIES, "model types") or f"supported model types: {listed}"
    return f"supported model types: {listed}"


def resolve_causal_lm(settings: Settings, kind: str, model: dict, written: dict, problems: list) -> None:
    """Fill `model` (defaults, preset and written settings merged) with its family and its config
    folder's settings, in place. Problems are appended, located."""
    if model.get("config") is not None and model.get("weights") is not None:
        problems.append(Diagnostic("model: config and weights both name the model",
                                   settings.span(("model", kind, "config"), True),
                                   hint="weights gives the config too: remove config"))  # fmt: skip
    elif model.get("config") is not None:
        _read_config_folder(settings, kind, model, written, problems)
    if kind == "llama":
        if model.get("model_type", "llama") != "llama":
            problems.append(Diagnostic(
                f'the config is for model_type "{model["model_type"]}", and model llama builds Llama',
                settings.span(("model", kind, "config"), True),
                hint=f'write model causal_lm {{ config = "{written.get("config")}" }}',
            ))  # fmt: skip
        model["model_type"] = "llama"
    model_type = model.get("model_type")
    if model_type is None:
        if model.get("weights") is None:  # a weights folder gives its own (plan/weights.py)
            problems.append(Diagnostic(
                "model causal_lm needs a model_type (or a preset, or a config folder)",
                settings.span(("model", kind), True),
                hint=f'write e.g. model_type = "mistral" ({_families_hint()}), preset = "mistral-7b" '
                'or config = "path/to/folder-with-config.json"',
            ))  # fmt: skip
        model["model_type"] = "llama"  # keep going to report more problems
        return
    if model_type not in FAMILIES:
        at = ("model", kind, "model_type") if settings.has(("model", kind, "model_type")) else ("model", kind)
        problems.append(Diagnostic(f'model_type "{model_type}" is not a family benchc builds',
                                   settings.span(at, True),
                                   hint=_families_hint(str(model_type))))  # fmt: skip
        model["model_type"] = "llama"
        return
    for name in FAMILY_ONLY:
        if name in written and name not in FAMILY_KEYS[model_type]:
            owners = [f for f, keys in FAMILY_KEYS.items() if name in keys]
            problems.append(Diagnostic(
                f"model_type {model_type} has no {name}",
                settings.span(("model", kind, name), True),
                hint=f"{name} applies to model_type {', '.join(owners)}; remove it",
            ))  # fmt: skip
    experts, routed = model.get("experts"), model.get("experts_per_token")
    if experts is not None and routed is not None and routed > experts:
        at = "experts_per_token" if "experts_per_token" in written else "experts"
        problems.append(Diagnostic(f"experts_per_token ({routed}) is more than experts ({experts})",
                                   settings.span(("model", kind, at), True),
                                   hint="a token is routed to at most every expert"))  # fmt: skip


def _read_config_folder(settings: Settings, kind: str, model: dict, written: dict, problems: list) -> None:
    """`config = "DIR"`: DIR/config.json gives the family and every setting the spec did not write."""
    key = ("model", kind, "config")
    at = settings.span(key, True)
    folder = _absolute(settings, key, str(model["config"]))
    try:
        raw = read_bounded(folder / "config.json", f"{model['config']}/config.json", "a model's config.json",
                           CONFIG_LIMIT, at)  # fmt: skip
        config = json.loads(raw.decode("utf-8"))
    except BenchError as exc:
        problems.extend(exc.diagnostics)
        return
    except (UnicodeDecodeError, ValueError) as exc:
        problems.append(Diagnostic(f"config: {folder}/config.json is not JSON: {exc}", at,
                                   hint="name a folder that save_pretrained wrote"))  # fmt: skip
        return
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        problems.append(Diagnostic(f"config: {folder}/config.json names no model_type", at,
                                   hint="name a folder that save_pretrained wrote"))  # fmt: skip
        return
    if model.get("model_type") not in (None, config["model_type"]) and "model_type" in written:
        problems.append(Diagnostic(
            f'model_type is "{model["model_type"]}", but {folder}/config.json is for '
            f'"{config["model_type"]}"',
            settings.span(("model", kind, "model_type"), True),
            hint="remove model_type: the config gives it",
        ))  # fmt: skip
        return
    try:  # every size bounded as the spec bounds it, before anything is built from it
        model_type, found, extra = causal_lm_settings(config, f"{folder}/config.json", "causal_lm")
    except CheckpointError as exc:
        problems.append(Diagnostic(f"config: {exc.message}", at, hint=exc.hint))
        return
    model["model_type"] = model_type
    for setting in config_keys(model_type):
        if setting not in written:
            model[setting] = found.get(setting)
    model["config_extra"] = extra
    model["config"] = str(folder)


def _absolute(settings: Settings, key: tuple, written: str) -> Path:
    path = Path(written).expanduser()
    if not path.is_absolute():
        source = settings.span(key).source.name
        files = {f.path for f in settings.document.files}
        path = (Path(source).parent if source in files else Path.cwd()) / path
    return path.resolve()


def build_causal_lm(m: dict, at: Span | None) -> CausalLM:
    """The typed model of a resolved causal LM: the shape as the built config holds it."""
    config = transformers_config(m)
    hint = f"check the model's settings against its family's config in transformers ({m['model_type']})"
    census = counted_or_located(census_of, config, at, hint)
    keys = config_keys(m["model_type"])
    intermediate = census.value(keys["intermediate"])
    windows = [w for w in census.windows if w]
    rope = census.value("rope_theta")
    return CausalLM(
        preset=m.get("preset"), model_type=m["model_type"], hidden=census.hidden, layers=census.layers,
        heads=census.q_width // census.head_dim, kv_heads=census.kv_width // census.head_dim,
        head_dim=census.head_dim, intermediate=int(intermediate or 0), vocab=census.vocab,
        max_positions=int(census.value("max_position_embeddings") or 0), experts=census.experts,
        experts_per_token=census.experts_per_token, sliding_window=max(windows) if windows else None,
        rope_theta=float(rope) if rope is not None else None, tie_embeddings=census.tied,
        weights=m.get("weights"), config=canonical(config), census=census,
    )  # fmt: skip
