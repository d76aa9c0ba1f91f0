"""The presets' census table that ships with benchc (catalog/causal_lm_census.json): every preset
a spec can name, counted afresh. `python -m benchc.plan.census_table` rewrites it;
tests/test_causal_lm.py checks it against a fresh count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..catalog.causal_lm import transformers_config
from ..catalog.presets import PRESETS
from .census import TABLE, canonical, count_afresh
from .lower import MODEL_DEFAULTS


def preset_configs() -> list[dict]:
    """The config of every preset a spec can name, as `model causal_lm` or `model llama`."""
    kinds = ("causal_lm", "llama")
    models = [{**MODEL_DEFAULTS[kind], **p} for kind in kinds for p in PRESETS[kind].values()]
    return [json.loads(text) for text in sorted({canonical(transformers_config(m)) for m in models})]


def write_table() -> Path:
    """Rewrite the shipped table: every preset's config counted afresh, in one child process."""
    configs = preset_configs()
    table = {canonical(c): answer for c, answer in zip(configs, count_afresh(configs), strict=True)}
    path = Path(__file__).resolve().parent.parent / "catalog" / TABLE
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    written = write_table()
    print(f"wrote the presets' census to {written}")
    sys.exit(0)
