"""Harness overhead: the median step time of the generated CPU training program (S1) against a
minimal hand-written PyTorch loop of the same model (diffusers SD3Transformer2DModel, same
config), batch, precision (bf16 autocast), attention kernel, optimizer, thread count and world
size (1 process).

    python benchmarks/harness_overhead.py [--rounds N] [--steps N] [--warmup N] [--threads N]

The build: specs/sd3.bench for the cpu target on 1 node x 1 device, with the smoke model's
shape (d2, 2 heads x 32) at batch 4 and 128x128, --steps steps of which --warmup are warmup.

How the two are compared: step by step, taking turns. On a shared machine the speed of one
core drifts by 20% and more over seconds (other tenants, caches, clocks), so two programs
run one after the other see different machines, and their ratio moves as much (the earlier
version of this benchmark measured an interquartile range of 0.14). Here both run at once
as separate processes, pinned to the same CPU, with one thread each, and pass a token
through two pipes so that only one of them is inside a step at any time: A's step 1, B's
step 1, A's step 2, ... Each step's neighbours in time are the other program's, so a drift
slower than a step (70 ms) falls on both alike. The token is taken just before a step's
clock starts and given back just before it stops (a one-byte pipe write, a few microseconds,
the same in both programs); the wait for it is outside the timed step.

The generated program runs as generated: its own main(), timing loop and metrics file. The
one change is its CPU adapter's synchronize(), a no-op on the CPU (nothing to wait for),
which the core calls right before and right after each timed step: here it takes and gives
the token. Which program goes first alternates between rounds.

Printed per round and over rounds: the ratio of the two programs' median step times (the
goal: at most 1.02, with an interquartile range over rounds under 0.02), the median of the
step-by-step ratios, and the 10th-percentile steps.
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

# Taking turns: a process holds the token while it runs a step. Shared by both programs.
TURN = textwrap.dedent(
    """
    import os

    class Turn:
        \"\"\"Alternate steps with the other program through two pipes: read a byte to take the
        token, write one to give it back. When the other program has ended (end of file, or
        a closed pipe), run freely.\"\"\"

        def __init__(self, take: int, give: int) -> None:
            self.take, self.give, self.holding, self.alone = take, give, False, False

        def flip(self) -> None:
            if not self.holding:
                if not self.alone and os.read(self.take, 1) == b"":
                    self.alone = True
                self.holding = True
                return
            self.holding = False
            if not self.alone:
                try:
                    os.write(self.give, b"t")
                except BrokenPipeError:
                    self.alone = True
    """
)

# The generated program, unchanged but for its adapter's synchronize() (see the docstring).
GENERATED = TURN + textwrap.dedent(
    """
    import importlib.util, sys

    take, give, metrics = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    spec = importlib.util.spec_from_file_location("bench", "bench.py")
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)  # defines; main() runs below, as `python bench.py` would
    turn = Turn(take, give)
    program.Device.synchronize = lambda self: turn.flip()
    code = program.main(["--metrics", metrics])
    if turn.holding:
        turn.flip()
    sys.exit(code)
    """
)

# The hand-written loop: what anyone would write to time this model, nothing more. The loss is
# SD3's rectified flow, as in the generated program, so both do the same arithmetic.
LOOP = TURN + textwrap.dedent(
    """
    import json, sys, time
    import torch
    from diffusers import SD3Transformer2DModel
    from torch.nn.attention import SDPBackend, sdpa_kernel

    take, give, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    plan, threads = json.loads(sys.argv[4]), int(sys.argv[5])
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
    turn = Turn(take, give)
    times = []
    for _ in range(run["steps"]):
        turn.flip()
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
        turn.flip()
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


def build(work: Path, steps: int, warmup: int, *sets: str, name: str = "build") -> Path:
    out = work / name
    extra = [a for s in sets for a in ("--set", s)]
    subprocess.run(
        [str(BENCHC), "compile", str(REPO / "specs" / "sd3.bench"), *BUILD, *extra,
         "--set", f"train.steps={steps}", "--set", f"train.warmup={warmup}", "-o", str(out)],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    (point,) = [p.parent for p in out.glob("*/cpu/*/bench.py")]
    return point


def take_turns(a: tuple[list, Path], b: tuple[list, Path], threads: int, cpu: int, a_first: bool) -> None:
    """Run two programs at once, each (argv, cwd) given its token pipe ends as its first two
    arguments, taking turns step by step on one CPU (see the module's docstring)."""
    a_to_b, b_to_a = os.pipe(), os.pipe()  # (read, write)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}

    def pinned() -> None:
        os.sched_setaffinity(0, {cpu})

    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "env": env, "preexec_fn": pinned}
    (a_argv, a_cwd), (b_argv, b_cwd) = a, b
    procs = [
        subprocess.Popen([sys.executable, a_argv[0], str(b_to_a[0]), str(a_to_b[1]), *a_argv[1:]], cwd=a_cwd,
                         pass_fds=(b_to_a[0], a_to_b[1]), **quiet),
        subprocess.Popen([sys.executable, b_argv[0], str(a_to_b[0]), str(b_to_a[1]), *b_argv[1:]], cwd=b_cwd,
                         pass_fds=(a_to_b[0], b_to_a[1]), **quiet),
    ]  # fmt: skip
    os.write(b_to_a[1] if a_first else a_to_b[1], b"t")  # who takes the first step
    for fd in (*a_to_b, *b_to_a):
        os.close(fd)  # the children hold their ends: a program's exit is the other's end of file
    errors = [p.communicate()[1] for p in procs]
    for proc, argv, err in zip(procs, (a_argv, b_argv), errors):
        if proc.returncode:
            raise SystemExit(f"{argv[0]} failed ({proc.returncode}):\n{err.decode()[-2000:]}")


def generated_program(work: Path, point: Path, metrics: Path) -> tuple[list, Path]:
    """The generated program at `point`, as take_turns runs it: (argv, cwd)."""
    (work / "generated.py").write_text(GENERATED)
    return [str(work / "generated.py"), str(metrics)], point


def step_times(metrics: Path) -> list[float]:
    found = json.loads(metrics.read_text())
    assert found["status"] == "ok", found.get("error")
    return found["step_time_s"]["all"]


def one_round(point: Path, plan: dict, work: Path, threads: int, cpu: int, generated_first: bool):
    """Both programs at once, taking turns step by step: (generated, hand-written) step times."""
    (work / "loop.py").write_text(LOOP)
    metrics, loop_out = work / "metrics.json", work / "loop.json"
    loop = [str(work / "loop.py"), str(loop_out), json.dumps(plan), str(threads)], work
    take_turns(generated_program(work, point, metrics), loop, threads, cpu, generated_first)
    found = json.loads(loop_out.read_text())
    assert found["threads"] == threads, found
    return step_times(metrics), found["all"]


def p10(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[0]


def paired_arguments(description: str) -> argparse.Namespace:
    """The options of a benchmark that runs two programs taking turns (this one, runtime_overhead)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=220)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)), help="the CPU both run on")
    return parser.parse_args()


def setup_line(plan: dict, args: argparse.Namespace) -> str:
    run = plan["train"]
    return (f"S1 cpu, 1 process each, {args.threads} thread(s), both on CPU {args.cpu}, taking turns step by "
            f"step; model d{plan['model']['config']['num_layers']} {plan['params']:,} params, batch "
            f"{run['micro_batch']}, {run['precision']}, attention {run['attention']}; {run['steps']} steps "
            f"({run['warmup']} warmup) per run, {args.rounds} rounds")  # fmt: skip


def summary(rows: dict[str, list[float]], medians: list[tuple[float, float]], what: str) -> str:
    """Each row's ratios over rounds (median, IQR, min-max) and the two median step times."""
    lines = [f"ratios {what} over rounds:"]
    for label, values in rows.items():
        median, iqr, low, high = spread(values)
        lines.append(f"  {label:34} median {median:.4f}, IQR {iqr:.4f}, min-max {low:.4f}-{high:.4f}")
    a, b = (statistics.median(m[i] for m in medians) * 1e3 for i in (0, 1))
    lines.append(f"  step times (median over rounds): {a:.2f} ms vs {b:.2f} ms")
    return "\n".join(lines)


def main() -> None:
    args = paired_arguments(__doc__.split("\n\n")[0])
    print(header("harness overhead"))
    with tempfile.TemporaryDirectory(prefix="benchc-harness-") as name:
        work = Path(name)
        point = build(work, args.steps, args.warmup)
        plan = plan_of(point / "bench.py")
        print(setup_line(plan, args))
        rows = {"median step": [], "step-by-step (median of ratios)": [], "p10 step": []}
        medians = []
        for i in range(args.rounds):
            a, b = one_round(point, plan, work, args.threads, args.cpu, generated_first=i % 2 == 0)
            ma, mb = statistics.median(a), statistics.median(b)
            medians.append((ma, mb))
            rows["median step"].append(ma / mb)
            rows["step-by-step (median of ratios)"].append(statistics.median(x / y for x, y in zip(a, b)))
            rows["p10 step"].append(p10(a) / p10(b))
            first = "generated" if i % 2 == 0 else "loop"
            print(f"  round {i + 1} ({first} first): step median generated {ma * 1e3:7.2f} ms, "
                  f"hand-written {mb * 1e3:7.2f} ms, ratio {ma / mb:.4f}", flush=True)  # fmt: skip
    print(summary(rows, medians, "generated / hand-written"))
    print("goal: the median-step ratio <= 1.02 with an IQR over rounds under 0.02")


if __name__ == "__main__":
    main()
