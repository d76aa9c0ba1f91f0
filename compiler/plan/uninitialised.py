"""Build models on the meta device without running their initialisers: what the census
counts (plan/census_probe.py, plan/census_flux.py) is shapes and tying, never values.

One job: the `uninitialised()` context. On the meta device an initialiser writes nothing, yet
torch runs each one through its Python reference kernels: for a model of 128 experts a layer,
most of a count's time (Qwen3-30B-A3B with another hidden size: 27 s, then 10 s, on 2 cores).
"""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def uninitialised():
    """Modules built inside skip their weights' initialisers: torch.nn.init's functions and
    transformers' initialize_weights. Shapes are unchanged, and transformers' tying still runs."""
    import torch

    functions = [name for name in dir(torch.nn.init) if name.endswith("_") and not name.startswith("_")]
    saved = {name: getattr(torch.nn.init, name) for name in functions}
    try:
        from transformers import PreTrainedModel
    except ImportError:  # a Flux count needs diffusers only
        PreTrainedModel = None
    initialize = getattr(PreTrainedModel, "initialize_weights", None)

    def skip(tensor, *args, **kwargs):
        return tensor

    try:
        for name in functions:
            setattr(torch.nn.init, name, skip)
        if initialize is not None:
            PreTrainedModel.initialize_weights = lambda self: None
        yield
    finally:
        for name, function in saved.items():
            setattr(torch.nn.init, name, function)
        if initialize is not None:
            PreTrainedModel.initialize_weights = initialize
