"""Each semantic rule accepts a consistent spec and rejects a broken one, with its rule stated."""

from __future__ import annotations

import pytest

from benchc.diagnostics import BenchError
from benchc.pipeline import plan_spec
from benchc.validate.semantic import RULES


def spec(model="model mmdit { depth = 4 }", work="train { batch = 4 }", rest="", targets="[h100]"):
    return f"experiment e {{\n  {model}\n  {work}\n  {rest}\n  targets = {targets}\n}}\n"


@pytest.fixture
def problems(write):
    def _problems(text: str, **kwargs) -> list:
        try:
            plan_spec(write("s.bench", text), **kwargs)
        except BenchError as exc:
            return list(exc.diagnostics)
        return []

    return _problems


CASES = [
    # (name, good spec, bad spec, words of the rule in the message or hint)
    (
        "world size",
        spec(rest="cluster { nodes = 2; devices_per_node = 4 } parallel { data = 8 }"),
        spec(rest="cluster { nodes = 2; devices_per_node = 4 } parallel { data = 4 }"),
        "nodes x devices_per_node = world size = data x tensor x pipeline",
    ),
    (
        "global batch",
        spec(
            work="train { batch = 2; grad_accum = 2; global_batch = 32 }",
            rest="cluster { devices_per_node = 8 }",
        ),
        spec(
            work="train { batch = 2; grad_accum = 2; global_batch = 64 }",
            rest="cluster { devices_per_node = 8 }",
        ),
        "global_batch = batch x grad_accum x parallel.data",
    ),
    (
        "heads divisible by tensor",
        spec(
            model="model llama { hidden = 512; layers = 2; heads = 8; intermediate = 1024 }",
            work="infer { batch = 1 }",
            rest="cluster { devices_per_node = 4 } parallel { tensor = 4 }",
        ),
        spec(
            model="model llama { hidden = 512; layers = 2; heads = 8; intermediate = 1024 }",
            work="infer { batch = 1 }",
            rest="cluster { devices_per_node = 3 } parallel { tensor = 3 }",
        ),
        "heads % tensor == 0",
    ),
    (
        "kv heads divisible by tensor",
        spec(
            model='model llama { preset = "llama-2-70b" }',
            work="infer { batch = 1 }",
            rest="cluster { devices_per_node = 8 } parallel { tensor = 8 }",
            targets="[cpu]",
        ),
        spec(
            model='model llama { preset = "llama-2-70b" }',
            work="infer { batch = 1 }",
            rest="cluster { devices_per_node = 16 } parallel { tensor = 16 }",
            targets="[cpu]",
        ),
        "kv_heads % tensor == 0",
    ),
    (
        "hidden divisible by heads",
        spec(model="model llama { hidden = 64; layers = 1; heads = 4; intermediate = 128 }"),
        spec(model="model llama { hidden = 66; layers = 1; heads = 4; intermediate = 128 }"),
        "head_dim = hidden / heads",
    ),
    (
        "llama head_dim even",
        spec(model="model llama { hidden = 64; layers = 1; heads = 4; head_dim = 8; intermediate = 128 }"),
        spec(model="model llama { hidden = 64; layers = 1; heads = 4; head_dim = 9; intermediate = 128 }"),
        "head_dim % 2 == 0",
    ),
    (
        "heads multiple of kv heads",
        spec(model="model llama { hidden = 64; layers = 1; heads = 4; kv_heads = 2; intermediate = 128 }"),
        spec(model="model llama { hidden = 64; layers = 1; heads = 4; kv_heads = 3; intermediate = 128 }"),
        "grouped-query attention",
    ),
    (
        "warmup before steps",
        spec(work="train { batch = 4; steps = 10; warmup = 9 }"),
        spec(work="train { batch = 4; steps = 10; warmup = 11 }"),
        "warmup < steps",
    ),
    (
        "resolution multiple of 8 x patch",
        spec(work="train { batch = 4; resolution = 512 }"),
        spec(work="train { batch = 4; resolution = 520 }"),
        "resolution / 8 (VAE) / patch",
    ),
    (
        "patches fit the position table",
        spec(
            model="model mmdit { depth = 4; pos_embed_max_size = 64 }",
            work="train { batch = 1; resolution = 1024 }",
        ),
        spec(
            model="model mmdit { depth = 4; pos_embed_max_size = 32 }",
            work="train { batch = 1; resolution = 1024 }",
        ),
        "resolution / 8 / patch <= pos_embed_max_size",
    ),
    (
        "sequence fits positions",
        spec(model='model llama { preset = "llama-2-7b" }', work="train { batch = 1; seq_len = 4096 }"),
        spec(model='model llama { preset = "llama-2-7b" }', work="train { batch = 1; seq_len = 8192 }"),
        "seq_len <= max_positions",
    ),
    (
        "precision supported by target",
        spec(work="train { batch = 1; precision = bf16 }", targets="[gaudi2]"),
        spec(work="train { batch = 1; precision = fp16 }", targets="[gaudi2]"),
        "optimum-habana rejects fp16",
    ),
    (
        "fp8 needs hardware",
        spec(work="train { batch = 1; precision = bf16 }", targets="[a100]"),
        spec(work="train { batch = 1; precision = fp8 }", targets="[a100]"),
        "no FP8 tensor cores",
    ),
    (
        "attention kernel supported by target",
        spec(work="train { batch = 1; attention = fused }", targets="[gaudi2]"),
        spec(work="train { batch = 1; attention = flash }", targets="[gaudi2]"),
        "write attention = fused (FusedSDPA)",
    ),
    (
        "no separate eager attention on Gaudi",
        spec(work="train { batch = 1; attention = sdpa }", targets="[gaudi2]"),
        spec(work="train { batch = 1; attention = eager }", targets="[gaudi2]"),
        "write attention = sdpa or fused",
    ),
    (
        "devices per node",
        spec(rest="cluster { devices_per_node = 8 }", targets="[gaudi2]"),
        spec(rest="cluster { devices_per_node = 9 }", targets="[gaudi2]"),
        "devices_per_node <= 8 on gaudi2",
    ),
    (
        "training-only settings",
        spec(model='model llama { preset = "llama-2-7b" }', work="infer { batch = 1 }"),
        spec(
            model='model llama { preset = "llama-2-7b" }',
            work="infer { batch = 1 }",
            rest="parallel { sharding = zero3 }",
        ),
        "applies to training",
    ),
]


@pytest.mark.parametrize("name, good, bad, rule", CASES, ids=[c[0] for c in CASES])
def test_rule(problems, name, good, bad, rule):
    assert problems(good) == []
    found = problems(bad)
    assert found, f"{name}: no error for a broken spec"
    text = " ".join(f"{d.message} {d.hint or ''}" for d in found)
    assert rule in text
    assert all(d.span is not None and d.span.source.name.endswith("s.bench") for d in found)


def test_what_is_not_generated_is_refused_by_check_at_the_setting(problems):
    """check refuses everything compile would (fp8, tensor-parallel training, ...)."""
    for work, rest, words in (
        ("train { batch = 1; precision = fp8 }", "", "fp8 programs are not generated yet"),
        ("train { batch = 4 }", "cluster { devices_per_node = 2 } parallel { tensor = 2 }",
         "tensor parallel training is not generated yet"),
    ):  # fmt: skip
        (found,) = problems(spec(work=work, rest=rest))
        assert words in found.message and found.span.source.name.endswith("s.bench")


def test_every_rule_states_its_rule():
    for check in RULES:
        assert check.__doc__ and len(check.__doc__) > 20, check.__name__


def test_independent_errors_are_reported_together(problems):
    text = spec(work="train { batch = 4; steps = 5; warmup = 9; resolution = 100 }", targets="[gaudi2]")
    text = text.replace("batch = 4;", "batch = 4; precision = fp16;")
    messages = [d.message for d in problems(text)]
    assert len(messages) == 3, messages


def test_errors_found_for_every_target_are_reported_once(problems):
    found = problems(spec(work="train { batch = 4; steps = 3; warmup = 5 }", targets="[h100, a100, h200]"))
    assert len(found) == 1
