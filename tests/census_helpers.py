"""Llama shapes counted as benchc counts every causal LM: the census of the model transformers
builds on the meta device (plan/census.py), and the FLOPs plan/flops.py derives from it."""

from __future__ import annotations

from benchc.catalog.causal_lm import transformers_config
from benchc.plan.census import Census, census_of
from benchc.plan.flops import ModelCost, causal_lm_cost, causal_lm_generate_flops


def llama_census(hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int, vocab: int, *,
                 head_dim: int | None = None) -> Census:  # fmt: skip
    model = {"model_type": "llama", "hidden": hidden, "layers": layers, "heads": heads, "kv_heads": kv_heads,
             "intermediate": intermediate, "vocab": vocab, "head_dim": head_dim}  # fmt: skip
    return census_of(transformers_config(model))


def llama_params(*shape: int, head_dim: int | None = None) -> int:
    return llama_census(*shape, head_dim=head_dim).params


def llama_cost(*shape_and_seq: int, head_dim: int | None = None) -> ModelCost:
    *shape, seq_len = shape_and_seq
    return causal_lm_cost(llama_census(*shape, head_dim=head_dim), seq_len)


def llama_generate_flops(*shape_and_tokens: int, head_dim: int | None = None) -> float:
    *shape, input_tokens, output_tokens = shape_and_tokens
    return causal_lm_generate_flops(llama_census(*shape, head_dim=head_dim), input_tokens, output_tokens)
