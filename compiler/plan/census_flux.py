"""Count a Flux transformer in census_probe.py's child process: diffusers'
FluxTransformer2DModel built on the meta device, run once there on a few tokens, and each
weight matrix sorted by the rows it multiplies.

One job: what plan/census.py's FluxCensus holds, from the model itself. Flux's double-stream
blocks keep separate weights for image and text tokens, its single-stream blocks share theirs
over both, and its modulation layers read one row per sample (the timestep, guidance and
pooled-text embedding): a forward on the meta device with 5 image and 3 text tokens tells
which matrices multiply 5, 3, 8 or 1 rows, with no per-family arithmetic and no memory.
"""

from __future__ import annotations

from benchc.plan.uninitialised import uninitialised

IMAGE_PROBE, TEXT_PROBE = 5, 3  # tokens of the meta forward: four distinct row counts
STREAMS = {IMAGE_PROBE: "image_matmul", TEXT_PROBE: "text_matmul",
           IMAGE_PROBE + TEXT_PROBE: "joint_matmul", 1: "sample_matmul"}  # fmt: skip


def flux_census(config: dict) -> dict:
    import torch
    from diffusers import FluxTransformer2DModel

    with torch.device("meta"), uninitialised():
        model = FluxTransformer2DModel(**config)
    rows: dict[int, int] = {}

    def record(module, inputs, _output) -> None:
        x = inputs[0]
        rows[id(module)] = x.numel() // x.shape[-1]

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    hooks = [m.register_forward_hook(record) for m in linears]
    image, text = IMAGE_PROBE, TEXT_PROBE
    with torch.device("meta"), torch.no_grad():
        model(
            hidden_states=torch.randn(1, image, config["in_channels"]),
            encoder_hidden_states=torch.randn(1, text, config["joint_attention_dim"]),
            pooled_projections=torch.randn(1, config["pooled_projection_dim"]),
            timestep=torch.ones(1),
            img_ids=torch.zeros(image, 3),
            txt_ids=torch.zeros(text, 3),
            guidance=torch.ones(1) if config.get("guidance_embeds") else None,
        )
    for hook in hooks:
        hook.remove()
    counts = dict.fromkeys(STREAMS.values(), 0)
    for linear in linears:
        stream = STREAMS.get(rows.get(id(linear)))
        if stream is None:
            raise ValueError(f"a Linear layer read {rows.get(id(linear))} rows, not a stream's")
        counts[stream] += linear.weight.numel()
    double, single = list(model.transformer_blocks), list(model.single_transformer_blocks)
    size = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
    params = size(model)
    return {
        "params": params,
        **counts,
        "double_layers": len(double),
        "single_layers": len(single),
        "inner": int(config["num_attention_heads"]) * int(config["attention_head_dim"]),
        "double_block": size(double[0]) if double else 0,
        "single_block": size(single[0]) if single else 0,
        "root": params - sum(size(b) for b in double + single),
        "largest_param": max(p.numel() for p in model.parameters()),
        "block_classes": sorted({type(b).__name__ for b in double + single}),
    }


def flux_tensors(config: dict) -> dict:
    """The tensors save_pretrained writes for this transformer: name -> shape."""
    import torch
    from diffusers import FluxTransformer2DModel

    with torch.device("meta"), uninitialised():
        model = FluxTransformer2DModel(**config)
    return {"tensors": {name: list(t.shape) for name, t in model.state_dict().items()}}
