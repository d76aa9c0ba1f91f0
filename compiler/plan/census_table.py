"""The presets' census tables that ship with benchc (catalog/causal_lm_census.json and
catalog/flux_census.json): every preset a spec can name, counted afresh.
`python -m benchc.plan.census_table` rewrites them; tests/test_causal_lm.py and tests/test_flux.py
check them against a fresh count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..catalog.causal_lm import transformers_config
from ..catalog.flux import transformer_config
from ..catalog.presets import PRESETS
from .census import FLUX_TABLE, TABLE, canonical, count_afresh, count_flux_afresh
from .lower import MODEL_DEFAULTS


def preset_configs() -> list[dict]:
    """The config of every preset a spec can name, as `model causal_lm` or `model llama`."""
    kinds = ("causal_lm", "llama")
    models = [{**MODEL_DEFAULTS[kind], **p} for kind in kinds for p in PRESETS[kind].values()]
    return [json.loads(text) for text in sorted({canonical(transformers_config(m)) for m in models})]


def flux_preset_configs() -> list[dict]:
    """FluxTransformer2DModel's keyword arguments of every Flux preset."""
    models = [{**MODEL_DEFAULTS["flux"], **p} for p in PRESETS["flux"].values()]
    return [json.loads(text) for text in sorted({canonical(transformer_config(m)) for m in models})]


def _write(name: str, configs: list[dict], answers: list[dict]) -> Path:
    table = {canonical(c): answer for c, answer in zip(configs, answers, strict=True)}
    path = Path(__file__).resolve().parent.parent / "catalog" / name
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def write_table() -> list[Path]:
    """Rewrite the shipped tables: every preset's config counted afresh, in one child process."""
    configs, flux = preset_configs(), flux_preset_configs()
    return [_write(TABLE, configs, count_afresh(configs)), _write(FLUX_TABLE, flux, count_flux_afresh(flux))]


if __name__ == "__main__":
    for written in write_table():
        print(f"wrote the presets' census to {written}")
    sys.exit(0)
