"""Helpers for tests that compile one point of a spec for the CPU (--smoke, one process) and
load its program as a module, or watch what it compiles."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from helpers import REPO, run_cli

WORKLOADS = {  # spec: experiment
    "sd3.bench": "sd3_mmdit_train",
    "beluga-train.bench": "beluga_70b_train",
    "sd3-infer.bench": "sd3_large_infer",
    "beluga-infer.bench": "beluga_70b_infer",
    "flux-infer.bench": "flux_dev_infer",
    "flux-train.bench": "flux_dev_train",
}
ONE_PROCESS = ("cluster.nodes=1", "cluster.devices_per_node=1", "parallel.data=1")


def compile_point(tmp_path: Path, spec: str, *overrides: str) -> Path:
    """One process on the CPU, shrunk (S4 in bf16: accelerate has no fp16 on the CPU)."""
    llama = ("train.global_batch=4", "train.precision=bf16") if spec == "beluga-train.bench" else ()
    sets = [arg for o in (*ONE_PROCESS, *llama, *overrides) for arg in ("--set", o)]
    result = run_cli("compile", f"specs/{spec}", "--smoke", "--target", "cpu", "-o", str(tmp_path), *sets,
                     cwd=REPO)  # fmt: skip
    assert result.code == 0, result.err
    points = sorted(p.parent for p in tmp_path.glob(f"{WORKLOADS[spec]}/cpu/*/bench.py"))
    return points[0]  # S1's first batch


def load_program(path: Path):
    spec = importlib.util.spec_from_file_location(f"bench_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FrameCounter:
    """A torch.compile backend that counts the graphs it is given and their nodes.

    It starts from a fresh dynamo: dynamo remembers, for the whole process, which sizes of a
    function's inputs changed, keyed by the function's file *contents* (torch/_dynamo/pgo.py's
    CodeId), so an identical generated program compiled earlier in the same test worker would
    have its first graph come out dynamic already, and one graph fewer would be counted."""

    def __init__(self) -> None:
        import torch

        torch._dynamo.reset()
        self.graphs = []

    def __call__(self, graph_module, example_inputs):
        self.graphs.append(len(graph_module.graph.nodes))
        return graph_module.forward


def model_from_local_weights(module):
    """A generated program's model as it loads its local weights in one process: built on the
    meta device from the folder's config, then each tensor read onto the CPU (materialise)."""
    import torch

    plan = module.PLAN["model"]
    model, buffers = module.build_on_meta(plan, True, torch.device("cpu"))
    module.materialise(model, buffers, torch.device("cpu"), plan["weights"])
    return model
