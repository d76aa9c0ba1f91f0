"""The child process plan/census.py runs: builds a transformers causal LM from a config on the
meta device and prints what it holds, as JSON. The only module of the check path that imports
torch, and only here, in its own process (benchc check / plan / compile never import torch).

Reads one request a line, {"config": {...}} (config.json's form), on stdin until it closes;
answers each with one line on stdout, one JSON object, or
{"error": "..."} for a config transformers refuses ({"configs": [...]}: a list of those;
{"config": ..., "tensors": true}: the tensors its checkpoint holds, name -> shape;
{"flux": {...}}: a Flux transformer of diffusers, counted by plan/census_flux.py). Counted
from the built model, for any family: parameters (a tied matrix once), the weight matrices a
token multiplies through (each expert list's weights scaled to the experts a token is routed
to, the router counted whole),
the output head, each layer's attention facts (query and key/value widths, sliding window),
the largest layer and parameter, the decoder-layer class and whether the config carries a
tensor-parallel plan.
"""

from __future__ import annotations

import json
import sys

from benchc.catalog.causal_lm import COMMON_KEYS, FAMILY_KEYS
from benchc.plan.uninitialised import uninitialised

# every config key a spec setting maps to, in any family: the values the built config holds
CONFIG_KEYS = {*COMMON_KEYS.values(), *(key for keys in FAMILY_KEYS.values() for key in keys.values())}


def _experts_per_token(config) -> tuple[int, int]:
    """(experts, experts a token is routed to) as the config names them; (0, 0) if dense."""
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None) or 0
    return int(experts), int(getattr(config, "num_experts_per_tok", 0) or 0)


def _window(layer, config, index: int) -> int | None:
    """The sliding window one decoder layer attends over, None for full attention."""
    attention = layer.self_attn
    if hasattr(attention, "sliding_window"):  # Qwen2/Qwen3: set per layer from layer_types
        window = attention.sliding_window
    elif getattr(config, "layer_types", None):
        window = config.sliding_window if config.layer_types[index] == "sliding_attention" else None
    else:  # Mistral, Mixtral: one window for every layer, if any
        window = getattr(config, "sliding_window", None)
    return int(window) if window else None


def built_on_meta(config_dict: dict):
    """(the transformers config, the causal LM it builds on the meta device, uninitialised)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = dict(config_dict)
    config = AutoConfig.for_model(data.pop("model_type"), **data)
    with torch.device("meta"), uninitialised():
        return config, AutoModelForCausalLM.from_config(config)


def census(config_dict: dict) -> dict:
    config, model = built_on_meta(config_dict)
    experts, routed = _experts_per_token(config)
    head = model.get_output_embeddings()
    embedding = model.get_input_embeddings()
    layers = list(model.model.layers)

    dense = expert = 0
    for layer in layers:
        # the experts' matrices, whether a list of Linear layers (transformers 4) or fused
        # [experts, out, in] parameters (transformers 5): every matrix under an `experts` module;
        # matrices, not Linear layers, so a router that is a bare parameter counts too
        expert_lists = [m for name, m in layer.named_modules() if name.endswith("experts")]
        in_experts = {id(p) for lst in expert_lists for p in lst.parameters()}
        expert += sum(p.numel() for lst in expert_lists for p in lst.parameters() if p.dim() >= 2)
        # every other matrix (projections, a router): what each token multiplies through
        dense += sum(p.numel() for p in layer.parameters() if p.dim() >= 2 and id(p) not in in_experts)
    attention = layers[0].self_attn
    head_dim = int(attention.head_dim)
    q_heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or q_heads)
    return {
        "model_class": type(model).__name__,
        "layer_class": type(layers[0]).__name__,
        "params": sum(p.numel() for p in model.parameters()),
        "embedding": embedding.weight.numel(),
        "head": head.weight.numel(),
        "tied": head.weight is embedding.weight,
        "dense_matmul": dense,
        "expert_matmul": expert,
        "experts": experts,
        "experts_per_token": routed,
        "layers": len(layers),
        "hidden": int(config.hidden_size),
        "vocab": int(config.vocab_size),
        "head_dim": head_dim,
        "q_width": q_heads * head_dim,
        "kv_width": kv_heads * head_dim,
        "windows": [_window(layer, config, i) for i, layer in enumerate(layers)],
        "largest_layer": max(sum(p.numel() for p in layer.parameters()) for layer in layers),
        "largest_param": max(p.numel() for p in model.parameters()),
        "tp_plan": bool(getattr(config, "base_model_tp_plan", None)),
        "no_split_modules": list(getattr(model, "_no_split_modules", None) or []),
        "resolved": {key: _plain(getattr(config, key, None)) for key in sorted(CONFIG_KEYS)},
    }


def _plain(value):
    """A config value as JSON holds it (numbers, strings, booleans, None)."""
    return value if isinstance(value, (int, float, str, bool)) or value is None else None


def tensors(config_dict: dict) -> dict:
    """The tensors save_pretrained writes for the model of this config: name -> shape (a tied
    output head is not written)."""
    config, model = built_on_meta(config_dict)
    tied = set(getattr(model, "_tied_weights_keys", None) or []) if config.tie_word_embeddings else set()
    return {"tensors": {name: list(t.shape) for name, t in model.state_dict().items() if name not in tied}}


def _answer(config: dict, what=census) -> dict:
    try:
        return what(config)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _respond(request: dict):
    if "flux" in request:  # {"flux": {...}}: a Flux transformer (plan/census_flux.py)
        from benchc.plan.census_flux import flux_census, flux_tensors

        return _answer(request["flux"], flux_tensors if request.get("tensors") else flux_census)
    if "configs" in request:  # several models at once: {"configs": [...]} -> a list
        return [_answer(config) for config in request["configs"]]
    if request.get("tensors"):  # {"config": ..., "tensors": true}: what its checkpoint holds
        return _answer(request["config"], tensors)
    return _answer(request["config"])


def main() -> int:
    """One request per line on stdin, one answer per line on stdout, until stdin closes (the
    parent ended: so does this process)."""
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(_respond(json.loads(line)), sort_keys=True) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
