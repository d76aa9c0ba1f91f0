"""No input, however mangled, makes the front end fail with anything but located diagnostics.

A deterministic mutation fuzz: token soup and random edits of a real spec, through the whole
front end (parse, includes, schema, semantic rules, lowering, smoke, --set).
"""

from __future__ import annotations

import random

from benchc.diagnostics import BenchError
from benchc.pipeline import plan_spec

from conftest import SPECS

TOKENS = (
    "experiment e { } [ ] ( ) = , ; . model mmdit llama sd3 train infer batch steps warmup 16 0 -1 1e3 "
    '2.5 "x" "sd3-medium" true false targets h100 gaudi2 cpu sweep include "base.bench" preset depth '
    "cluster nodes devices_per_node parallel tensor data on reference where target value unit optimizer "
    "adamw lr global_batch grad_accum resolution heads precision bf16 fp16 kv_heads sharding zero3"
).split() + ["\n", "# comment\n"]


def test_mutated_specs_give_only_located_errors(tmp_path):
    rng = random.Random(20261202)
    base = (SPECS / "sd3.bench").read_text()
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "sd3-mmdit-train.bench").write_text(
        (SPECS / "common" / "sd3-mmdit-train.bench").read_text()
    )
    (tmp_path / "base.bench").write_text("train { batch = 2 }\n")
    outcomes = {"ok": 0, "error": 0}
    for _ in range(300):
        if rng.random() < 0.4:
            text = " ".join(rng.choice(TOKENS) for _ in range(rng.randrange(1, 60)))
        else:
            chars = list(base)
            for _ in range(rng.randrange(1, 6)):
                position = rng.randrange(len(chars))
                roll = rng.random()
                if roll < 0.33:
                    del chars[position]
                elif roll < 0.66:
                    chars.insert(position, rng.choice(TOKENS) + " ")
                else:
                    chars[position] = rng.choice('{}[]()=,;."0123456789abc \n')
            text = "".join(chars)
        path = tmp_path / "fuzz.bench"
        path.write_text(text)
        for options in ({}, {"smoke": True}, {"overrides": ["train.batch=4"]}):
            try:
                plan_spec(path, **options)
                outcomes["ok"] += 1
            except BenchError as exc:
                assert exc.diagnostics and all(d.message for d in exc.diagnostics)
                outcomes["error"] += 1
    assert outcomes["ok"] > 0 and outcomes["error"] > 0  # the fuzz reached both outcomes
