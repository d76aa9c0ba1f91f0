"""Harness overhead: the median step time of the generated CPU training program (S1, run the way
a user runs it, `benchc run BUILD_POINT`) against a minimal hand-written PyTorch loop of the
same model (diffusers SD3Transformer2DModel, same config), batch, precision (bf16 autocast),
attention kernel, optimizer, thread count and world size (1 process).

    python benchmarks/harness_overhead.py [--rounds N] [--steps N] [--threads N]

The build: specs/sd3.bench for the cpu target on 1 node x 1 device, with the smoke model's
shape (d2, 2 heads x 32) at batch 4 and 128x128, --steps steps of which --warmup are warmup
(see BUILD below; --smoke itself fixes 5 steps). Both programs run as separate processes
with OMP_NUM_THREADS=N and torch.set_num_threads(N) (the generated program takes the thread
count from OMP_NUM_THREADS, which launch.sh keeps when it is set). Each round runs both, back
to back, alternating which goes first (A B, B A, ...); the ratio of one round is the
generated program's median step time over the loop's. Printed: the median ratio over the
rounds and its spread (interquartile range, min-max). Goal: at most 1.02, spread under 0.02.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, spread  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BENCHC = Path(sys.executable).parent / "benchc"

BUILD = [
    "--target", "cpu",
    "--set", "cluster.nodes=1", "--set", "cluster.devices_per_node=1", "--set", "parallel.data=1",
    "--set", "model.mmdit.depth=2", "--set", "model.mmdit.heads=2", "--set", "model.mmdit.head_dim=32",
    "--set", "model.mmdit.caption_projection_dim=64", "--set", "model.mmdit.joint_attention_dim=64",
    "--set", "model.mmdit.pooled_projection_dim=64", "--set", "model.mmdit.text_tokens=16",
    "--set", "model.mmdit.pos_embed_max_size=16",
    "--set", "train.batch=4", "--set", "train.resolution=128",
]  # fmt: skip

# The hand-written loop: what anyone would write to time this model, nothing more. The loss is
# SD3's rectified flow, as in the generated program, so both do the same arithmetic.
LOOP = textwrap.dedent(
    """
    import json, statistics, sys, time
    import torch
    from diffusers import SD3Transformer2DModel
    from torch.nn.attention import SDPBackend, sdpa_kernel

    plan, threads, out = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if sys.argv[4:] == ["cpu"]:
        time.perf_counter = time.thread_time
    torch.set_num_threads(threads)
    run, config = plan["train"], plan["model"]["config"]
    torch.manual_seed(run["seed"])
    model = SD3Transformer2DModel(**config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), **run["optimizer"]["args"])
    torch.manual_seed(run["seed"])
    batch, size = run["micro_batch"], run["latent_size"]
    latents = torch.randn(batch, config["in_channels"], size, size)
    prompt = torch.randn(batch, plan["model"]["text_tokens"], config["joint_attention_dim"])
    pooled = torch.randn(batch, config["pooled_projection_dim"])
    times = []
    for _ in range(run["steps"]):
        begin = time.perf_counter()
        noise = torch.randn_like(latents)
        sigma = torch.sigmoid(torch.randn(batch))
        s = sigma.view(-1, 1, 1, 1)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                prediction = model(hidden_states=(1.0 - s) * latents + s * noise,
                                   encoder_hidden_states=prompt, pooled_projections=pooled,
                                   timestep=sigma * 1000.0).sample
            loss = torch.nn.functional.mse_loss(prediction.float(), (noise - latents).float())
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - begin)
        float(loss)
    measured = times[run["warmup"]:]
    json.dump({"all": measured, "threads": torch.get_num_threads()}, open(out, "w"))
    """
)


def plan_of(bench_py: Path) -> dict:
    """The PLAN literal of a generated program, read without running it."""
    for node in ast.parse(bench_py.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PLAN":
            return ast.literal_eval(node.value)
    raise LookupError(f"no PLAN in {bench_py}")


def build(work: Path, steps: int, warmup: int) -> Path:
    out = work / "build"
    subprocess.run(
        [str(BENCHC), "compile", str(REPO / "specs" / "sd3.bench"), *BUILD,
         "--set", f"train.steps={steps}", "--set", f"train.warmup={warmup}", "-o", str(out)],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    (point,) = [p.parent for p in out.glob("*/cpu/*/bench.py")]
    return point


def _env(threads: int) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHON": sys.executable}


def generated(point: Path, work: Path, threads: int) -> list[float]:
    """benchc run of the point; the median step time of the run's metrics."""
    db = work / "results.db"
    subprocess.run([str(BENCHC), "run", str(point), "--db", str(db)], check=True, cwd=work,
                   env=_env(threads), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    sys.path.insert(0, str(REPO))
    from benchc.results.store import Store

    with Store(db) as store:
        last = store.runs()[-1]
    assert last.status == "ok", last.cause
    return last.metrics["step_time_s"]["all"]


# The generated program with its clock swapped for the CPU time of its thread (all of a step's
# work runs on the main thread with 1 intra-op thread): what the step costs, whatever else runs.
CPU_CLOCK = (
    "import runpy, sys, time; time.perf_counter = time.thread_time; "
    "sys.argv = ['bench.py', '--metrics', sys.argv[1]]; runpy.run_path('bench.py', run_name='__main__')"
)


def generated_cpu(point: Path, work: Path, threads: int) -> list[float]:
    """The generated program run directly (python bench.py), timed by CPU time per step."""
    metrics = work / "cpu-metrics.json"
    subprocess.run([sys.executable, "-c", CPU_CLOCK, str(metrics)], check=True, cwd=point,
                   env=_env(threads), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return json.loads(metrics.read_text())["step_time_s"]["all"]


def hand_written(plan: dict, work: Path, threads: int, clock: str = "wall") -> list[float]:
    script, out = work / "loop.py", work / "loop.json"
    script.write_text(LOOP)
    subprocess.run([sys.executable, str(script), json.dumps(plan), str(threads), str(out), clock], check=True,
                   env=_env(threads), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    found = json.loads(out.read_text())
    assert found["threads"] == threads, found
    return found["all"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=("wall", "cpu", "both"), default="both")
    args = parser.parse_args()
    print(header("harness overhead"))
    with tempfile.TemporaryDirectory(prefix="benchc-harness-") as name:
        work = Path(name)
        point = build(work, args.steps, args.warmup)
        plan = plan_of(point / "bench.py")
        run = plan["train"]
        print(f"S1 cpu, 1 process, {args.threads} thread(s); model d{plan['model']['config']['num_layers']} "
              f"{plan['params']:,} params, batch {run['micro_batch']}, {run['precision']}, "
              f"attention {run['attention']}; {run['steps']} steps ({run['warmup']} warmup) per run, "
              f"{args.rounds} interleaved rounds")  # fmt: skip
        pairs = {
            "wall": (lambda: generated(point, work, args.threads),
                     lambda: hand_written(plan, work, args.threads)),
            "cpu": (lambda: generated_cpu(point, work, args.threads),
                    lambda: hand_written(plan, work, args.threads, "cpu")),
        }  # fmt: skip
        pairs = {clock: pair for clock, pair in pairs.items() if args.clock in (clock, "both")}
        found: dict[str, list[tuple[float, float]]] = {}  # (generated, hand-written) per round
        for i in range(args.rounds):
            for clock, (run_a, run_b) in pairs.items():
                if i % 2 == 0:
                    a, b = run_a(), run_b()
                else:
                    b, a = run_b(), run_a()
                for stat, of in (("median", statistics.median), ("p10", p10)):
                    found.setdefault(f"{clock} {stat}", []).append((of(a), of(b)))
                ma, mb = statistics.median(a), statistics.median(b)
                print(f"  round {i + 1} {clock:4}: step median generated {ma * 1e3:7.2f} ms, "
                      f"hand-written {mb * 1e3:7.2f} ms, ratio {ma / mb:.4f}", flush=True)  # fmt: skip
    print("wall: step times as the program measures them, run by `benchc run`; cpu: CPU time of the "
          "step's thread, the program run directly; p10: the 10th percentile of a run's steps "
          "(the steps least disturbed by other work on the machine)")  # fmt: skip
    for name, values in found.items():
        median, iqr, low, high = spread([a / b for a, b in values])
        print(f"{name:11} ratio median {median:.4f}, IQR {iqr:.4f}, min-max {low:.4f}-{high:.4f}; "
              f"{statistics.median(a for a, _ in values) * 1e3:.2f} ms vs "
              f"{statistics.median(b for _, b in values) * 1e3:.2f} ms")  # fmt: skip
    print("goal: the wall median ratio <= 1.02 with a spread (IQR) under 0.02")


def p10(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[0]


if __name__ == "__main__":
    main()
