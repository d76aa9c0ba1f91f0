"""The project's own hand-written, tuned training loop for S1's model and shape: the yardstick
for benchc's generated CUDA training program under `optimize = tuned`.

What an expert would write by hand without benchc, standalone torch + diffusers (no benchc
import, so it stays independent of what it measures): diffusers' SD3Transformer2DModel with
the MMDiT-ps2-d24 config (SD3 Medium; the config of specs/sd3.bench's plan), built directly on
the device; q/k/v projections fused (diffusers' fuse_qkv_projections, the unfused weights
dropped); each transformer block compiled on its own (regional torch.compile, fullgraph);
SDPA with the backend priority cuDNN > flash > memory-efficient; fused AdamW (lr 1e-4,
weight decay 0); bf16 autocast; the rectified-flow loss of SD3 (the same arithmetic as
templates/model_mmdit.py.j2's compute_loss); CUDA events around each step and no host
synchronisation inside the measured window; the garbage collector frozen during it.

    python benchmarks/handwritten_train.py --batch 16 --metrics hand.json     # one GPU
    python benchmarks/handwritten_train.py --device cpu --smoke               # CI, seconds

It prints one JSON line (and writes it to --metrics): step time median / p10 / p90, images/s,
model FLOPs per image (3 x the forward pass, counted as compiler/plan/flops.py counts them;
or --flops-per-sample), MFU against --peak-flops (989e12, H100/H200 dense bf16, by default on
CUDA), startup_s (process start, imports included, to the first step), compile_s (the first
warmup step, which compiles; null without compilation), peak device memory: the definitions
of benchc's metrics, so the two compare. On SIGTERM (a `timeout`) or an error it still writes
the line, with the status `timeout` or `failed`.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()  # before torch is imported; startup_s counts from the process start

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

# SD3 Medium's MMDiT (ps2, d24): hidden 24 x 64 = 1536, 2,028,328,000 parameters.
D24 = {
    "sample_size": 32,
    "patch_size": 2,
    "in_channels": 16,
    "out_channels": 16,
    "num_layers": 24,
    "attention_head_dim": 64,
    "num_attention_heads": 24,
    "joint_attention_dim": 4096,
    "caption_projection_dim": 1536,
    "pooled_projection_dim": 2048,
    "pos_embed_max_size": 192,
    "qk_norm": None,
}
TEXT_TOKENS = 154  # CLIP-L/G 77 + T5 77
# --smoke: the shape benchc's --smoke uses for an MMDiT (2 blocks, hidden 64, 16x16 latents).
SMOKE = {
    **D24,
    "num_layers": 2,
    "attention_head_dim": 32,
    "num_attention_heads": 2,
    "joint_attention_dim": 64,
    "caption_projection_dim": 64,
    "pooled_projection_dim": 64,
    "pos_embed_max_size": 16,
}
SMOKE_TEXT_TOKENS = 16
H200_BF16_PEAK = 989e12  # dense bf16 FLOP/s, the datasheet figure (H100 SXM: the same)
TIMESTEP_CHANNELS = 256


class Stopped(Exception):
    """SIGTERM arrived (the time limit of `timeout`)."""


def train_flops_per_sample(config: dict, latent_size: int, text_tokens: int) -> float:
    """Model FLOPs of one training sample: 3 x the forward pass, 2 FLOPs per multiply-add,
    the matrix multiplications and attention products (the count of compiler/plan/flops.py,
    written out again here so this loop owes nothing to benchc)."""
    h = config["attention_head_dim"] * config["num_attention_heads"]
    depth, patch, channels = config["num_layers"], config["patch_size"], config["in_channels"]
    s_i, s_t = (latent_size // patch) ** 2, text_tokens
    mlp = 2 * 4 * h * h
    macs = depth * s_i * (4 * h * h + mlp)  # image tokens: q k v out, MLP
    macs += depth * s_t * 3 * h * h + (depth - 1) * s_t * (h * h + mlp)  # text (last: q k v only)
    macs += depth * 2 * (s_i + s_t) ** 2 * h  # joint attention: scores and values
    macs += depth * 6 * h * h + (depth - 1) * 6 * h * h + 2 * h * h  # AdaLN modulation
    macs += TIMESTEP_CHANNELS * h + h * h + config["pooled_projection_dim"] * h + h * h + 2 * h * h
    macs += s_i * channels * patch * patch * h + s_t * config["joint_attention_dim"] * h
    macs += s_i * h * patch * patch * channels  # output projection
    return 3.0 * 2.0 * macs


def since_process_start() -> float:
    """Seconds since this process started (Linux: its start time in /proc, the interpreter's
    own startup included); elsewhere since the top of this script."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
            age = float(uptime.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - T0
    return max(age, time.perf_counter() - T0)


def percentile(ordered: list[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--batch", type=int, default=None, help="images per step (16; --smoke: 2)")
    p.add_argument("--latent-size", type=int, default=None, help="latent side (32 = 256x256; --smoke: 16)")
    p.add_argument("--warmup", type=int, default=None, help="unmeasured steps first (10; --smoke: 2)")
    p.add_argument("--steps", type=int, default=None, help="measured steps (40; --smoke: 3)")
    p.add_argument("--smoke", action="store_true", help="a tiny model (2 blocks, hidden 64)")
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compile each block (default: on, off with --smoke)",
    )
    p.add_argument(
        "--peak-flops",
        type=float,
        default=None,
        help="dense peak FLOP/s for the MFU (default on CUDA: 989e12; on the CPU none)",
    )
    p.add_argument(
        "--flops-per-sample",
        type=float,
        default=None,
        help="model FLOPs per training image (default: counted from the config)",
    )
    p.add_argument("--metrics", default=None, help="also write the JSON line to this file")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    smoke = args.smoke
    args.batch = args.batch if args.batch is not None else (2 if smoke else 16)
    args.latent_size = args.latent_size if args.latent_size is not None else (16 if smoke else 32)
    args.warmup = args.warmup if args.warmup is not None else (2 if smoke else 10)
    args.steps = args.steps if args.steps is not None else (3 if smoke else 40)
    args.compile = (not smoke) if args.compile is None else args.compile
    if min(args.batch, args.latent_size, args.steps) < 1 or args.warmup < 0:
        p.error("--batch, --latent-size and --steps must be at least 1, --warmup at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    result: dict = {"schema": "handwritten-train", "status": "failed", "error": None}
    stopped = []

    def on_term(signum, frame):
        stopped.append(signum)
        raise Stopped("stopped by SIGTERM (the time limit)")

    signal.signal(signal.SIGTERM, on_term)
    try:
        result.update(run(args))
    except BaseException as error:  # noqa: BLE001 - reported in the metrics, then re-raised as status
        result["status"] = "timeout" if stopped else "failed"
        if isinstance(error, KeyboardInterrupt) and not stopped:
            result["status"] = "interrupted"
        result["error"] = {
            "type": type(error).__name__,
            "message": str(error)[:2000],
            "traceback": traceback.format_exc()[-4000:],
        }
    result["wall_s"] = time.perf_counter() - T0
    line = json.dumps(result, allow_nan=False, default=str)
    if args.metrics:
        with open(args.metrics, "w") as f:
            f.write(line + "\n")
    print(line, flush=True)
    return 0 if result["status"] == "ok" else 1


def run(args: argparse.Namespace) -> dict:
    import torch
    from diffusers import SD3Transformer2DModel
    from torch.nn.attention import SDPBackend, sdpa_kernel

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise RuntimeError(f"--device {args.device}, but torch {torch.__version__} finds no CUDA device")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 leftovers outside autocast
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True  # the patch embedding's convolution
    config = SMOKE if args.smoke else D24
    text_tokens = SMOKE_TEXT_TOKENS if args.smoke else TEXT_TOKENS
    flops = args.flops_per_sample or train_flops_per_sample(config, args.latent_size, text_tokens)
    peak = args.peak_flops if args.peak_flops is not None else (H200_BF16_PEAK if cuda else None)

    torch.manual_seed(args.seed)
    with torch.device(device):
        model = SD3Transformer2DModel(**config)
    model.train()
    fused_qkv = hasattr(model, "fuse_qkv_projections")
    if fused_qkv:
        model.fuse_qkv_projections()
        for module in model.modules():  # the fused copies replace these: drop the originals
            if getattr(module, "fused_projections", False):
                for name in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"):
                    if getattr(module, name, None) is not None:
                        delattr(module, name)
    if args.compile:
        for block in model.transformer_blocks:
            block.compile(fullgraph=True)
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=True)

    batch, size, c = args.batch, args.latent_size, config
    latents = torch.randn(batch, c["in_channels"], size, size, device=device)
    prompt = torch.randn(batch, text_tokens, c["joint_attention_dim"], device=device)
    pooled = torch.randn(batch, c["pooled_projection_dim"], device=device)
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    priority = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]

    def step() -> torch.Tensor:
        noise = torch.randn_like(latents)
        sigma = torch.sigmoid(torch.randn(batch, device=device))
        s = sigma.view(-1, 1, 1, 1)
        noisy = (1.0 - s) * latents + s * noise
        with autocast:
            prediction = model(
                hidden_states=noisy,
                encoder_hidden_states=prompt,
                pooled_projections=pooled,
                timestep=sigma * 1000.0,
                return_dict=False,
            )[0]
        loss = torch.nn.functional.mse_loss(prediction.float(), (noise - latents).float())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    losses: list = []
    warmup_times: list[float] = []
    with sdpa_kernel(priority, set_priority=True):
        sync()
        startup = since_process_start()
        for _ in range(args.warmup):  # compilation happens here: each warmup step timed alone
            begin = time.perf_counter()
            losses.append(step())
            sync()
            warmup_times.append(time.perf_counter() - begin)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        gc.collect()
        gc.freeze()
        gc.disable()
        try:
            if cuda:  # events around each step; the host never waits inside the window
                events = [
                    (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                    for _ in range(args.steps)
                ]
                window = time.perf_counter()
                for start, end in events:
                    start.record()
                    losses.append(step())
                    end.record()
                torch.cuda.synchronize()
                window = time.perf_counter() - window
                times = [start.elapsed_time(end) / 1000.0 for start, end in events]
            else:
                times = []
                window = time.perf_counter()
                for _ in range(args.steps):
                    begin = time.perf_counter()
                    losses.append(step())
                    times.append(time.perf_counter() - begin)
                window = time.perf_counter() - window
        finally:
            gc.enable()
            gc.unfreeze()
    loss_values = torch.stack(losses).float().cpu().tolist()
    if not all(math.isfinite(v) for v in loss_values):
        raise FloatingPointError(f"non-finite loss: {loss_values}")
    if cuda:
        peak_memory = torch.cuda.max_memory_allocated(device)
        device_name = torch.cuda.get_device_name(device)
    else:
        import resource

        peak_memory = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        device_name = platform.processor() or "cpu"
    ordered = sorted(times)
    median = statistics.median(times)
    images_per_s = batch * len(times) / sum(times)
    achieved = flops * images_per_s
    compile_s = warmup_times[0] if args.compile and warmup_times else None
    return {
        "status": "ok",
        "workload": "train",
        "optimize": "handwritten",
        "optimize_detail": {
            "compile": "per block, fullgraph" if args.compile else "off",
            "fused_qkv": fused_qkv,
            "sdpa_priority": "cudnn, flash, efficient",
            "optimizer": "adamw fused",
            "autocast": "bf16",
            "cudnn_benchmark": cuda,
            "timing": "cuda events, no host sync in the window" if cuda else "perf_counter",
        },
        "device_name": device_name,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "diffusers": __import__("diffusers").__version__,
            "cuda": torch.version.cuda,
        },
        "config": {
            "batch": batch,
            "latent_size": size,
            "text_tokens": text_tokens,
            "layers": c["num_layers"],
            "hidden": c["attention_head_dim"] * c["num_attention_heads"],
            "params": params,
            "smoke": args.smoke,
        },
        "steps": {"total": args.warmup + args.steps, "warmup": args.warmup, "measured": args.steps},
        "step_time_s": {
            "median": median,
            "p10": percentile(ordered, 0.10),
            "p90": percentile(ordered, 0.90),
            "mean": statistics.fmean(times),
            "all": times,
        },
        "window_s": window,
        "throughput": {
            "unit": "images/s",
            "job": images_per_s,
            "per_device": images_per_s,
            "samples_per_step": batch,
        },
        "flops": {
            "model_flops_per_sample": flops,
            "achieved_per_device": achieved,
            "peak_per_device": peak,
            "mfu": achieved / peak if peak else None,
        },
        "startup_s": startup,
        "warmup_s": sum(warmup_times),
        "first_step_s": warmup_times[0] if warmup_times else None,
        "compile_s": compile_s,
        "peak_memory_bytes": int(peak_memory),
        "loss": {"first": loss_values[0], "last": loss_values[-1]},
    }


if __name__ == "__main__":
    sys.exit(main())
