"""Lower `model flux { ... }` to a typed FluxModel (training) or FluxPipeline (inference).

One job: from resolved settings to the typed model, counted on the meta device
(plan/census.py's FluxCensus). Settings a Flux transformer cannot take are located errors here.
"""

from __future__ import annotations

import json

from ..catalog.flux import HEAD_DIM_MULTIPLE, MAX_TEXT_TOKENS, transformer_config
from ..diagnostics import Diagnostic, Span
from .census import canonical, counted_or_located, flux_census_of
from .types import FluxModel, FluxPipeline
from .variants import Settings


def check_flux(settings: Settings, m: dict, problems: list) -> None:
    """Flux's own rules: a head width its rotary embedding can split, the pipeline's text limit."""
    head_dim = m.get("head_dim")
    if isinstance(head_dim, int) and head_dim % HEAD_DIM_MULTIPLE:
        problems.append(Diagnostic(
            f"model.flux.head_dim = {head_dim} is not a multiple of {HEAD_DIM_MULTIPLE}",
            settings.span(("model", "flux", "head_dim")),
            hint="Flux's rotary embedding splits each head into three even axes (16, 56, 56 of "
            "128): write a multiple of 32",
        ))  # fmt: skip
    tokens = m.get("text_tokens")
    if isinstance(tokens, int) and tokens > MAX_TEXT_TOKENS:
        problems.append(Diagnostic(
            f"model.flux.text_tokens = {tokens} is more than Flux's {MAX_TEXT_TOKENS}",
            settings.span(("model", "flux", "text_tokens")),
            hint=f"FluxPipeline refuses a max_sequence_length over {MAX_TEXT_TOKENS}",
        ))  # fmt: skip


def build_flux(m: dict, workload: str, at: Span | None) -> FluxModel | FluxPipeline:
    """The typed Flux transformer (its census counted on the meta device), or the whole
    pipeline around it for inference."""
    config = transformer_config(m)
    census = counted_or_located(flux_census_of, config, at, "check the model's settings")
    heads, head_dim = config["num_attention_heads"], config["attention_head_dim"]
    transformer = FluxModel(
        preset=m.get("preset"), depth=census.double_layers, single_depth=census.single_layers,
        heads=heads, head_dim=head_dim, hidden=heads * head_dim,
        joint_attention_dim=config["joint_attention_dim"],
        pooled_projection_dim=config["pooled_projection_dim"], guidance=config["guidance_embeds"],
        text_tokens=int(m["text_tokens"]), weights=m.get("weights") if workload == "train" else None,
        config=canonical(config), census=census,
    )  # fmt: skip
    if workload == "train":
        return transformer
    return FluxPipeline(transformer, m.get("weights"))


def config_of(model: FluxModel) -> dict:
    """FluxTransformer2DModel's keyword arguments, as the plan holds them."""
    return json.loads(model.config)
