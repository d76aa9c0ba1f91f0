"""The SD3 pipeline's output is checked as training checks its loss: a run whose denoised
latents are not finite (they would decode to black images) is recorded as failed."""

from __future__ import annotations

import json

import pytest
import torch
from program_helpers import compile_point, load_program

pytestmark = pytest.mark.integration


def test_non_finite_latents_fail_the_run(tmp_path):
    module = load_program(compile_point(tmp_path, "sd3-infer.bench") / "bench.py")
    build = module.build_pipeline

    def poisoned(*args, **kwargs):  # the MMDiT's prediction turned to NaN by a forward hook
        pipe = build(*args, **kwargs)

        def nan_output(block, inputs, output):
            return (output[0] * torch.nan, *output[1:])

        pipe.transformer.register_forward_hook(nan_output)
        return pipe

    module.build_pipeline = poisoned
    metrics_path = tmp_path / "metrics.json"
    with pytest.raises(FloatingPointError):  # recorded, then re-raised for the launcher
        module.main(["--metrics", str(metrics_path)])
    metrics = json.loads(metrics_path.read_text())
    assert metrics["status"] == "failed"
    assert metrics["error"]["type"] == "FloatingPointError"
    assert metrics["error"]["message"] == "the denoised latents are not finite in call 1"
