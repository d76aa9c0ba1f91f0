"""The accelerate runtime against the torch runtime: the median step time of the same S1 CPU
point compiled with `runtime = accelerate` and with `runtime = torch`, run side by side.

    python benchmarks/runtime_overhead.py [--rounds N] [--steps N] [--warmup N] [--threads N]

The point is harness_overhead.py's (S1 on 1 process, the smoke model's shape at batch 4,
128x128, bf16, fused attention, AdamW); both programs are generated, unchanged but for their
CPU adapter's synchronize() taking a token, and run at once on one CPU taking turns step by
step (harness_overhead.py's docstring says why and how). With one process there is no
gradient reduction: the ratio is what accelerate's layer costs on the step itself (its
prepared model's autocast wrapper and output conversion, accumulate(), its optimizer
wrapper), not a communication difference. Which program goes first alternates by round.
"""

from __future__ import annotations

import importlib.metadata
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header  # noqa: E402
from harness_overhead import (  # noqa: E402
    build,
    generated_program,
    p10,
    paired_arguments,
    plan_of,
    setup_line,
    step_times,
    summary,
    take_turns,
)


def main() -> None:
    args = paired_arguments(__doc__.split("\n\n")[0])
    print(header("runtime overhead"))
    versions = ", ".join(f"{n} {importlib.metadata.version(n)}" for n in ("torch", "accelerate", "diffusers"))
    with tempfile.TemporaryDirectory(prefix="benchc-runtime-") as name:
        work = Path(name)
        torch_point = build(work, args.steps, args.warmup, name="torch")
        accelerate_point = build(work, args.steps, args.warmup, "runtime=accelerate", name="accelerate")
        plan = plan_of(accelerate_point / "bench.py")
        assert plan["runtime"] == "accelerate" and plan_of(torch_point / "bench.py")["runtime"] == "torch"
        print(f"{setup_line(plan, args)}; {versions}")
        rows: dict[str, list[float]] = {"median step": [], "p10 step": []}
        medians = []
        for i in range(args.rounds):
            (work / "a").mkdir(exist_ok=True)
            (work / "t").mkdir(exist_ok=True)
            a_metrics, t_metrics = work / "a" / "metrics.json", work / "t" / "metrics.json"
            take_turns(generated_program(work / "a", accelerate_point, a_metrics),
                       generated_program(work / "t", torch_point, t_metrics),
                       args.threads, args.cpu, a_first=i % 2 == 0)  # fmt: skip
            a, t = step_times(a_metrics), step_times(t_metrics)
            ma, mt = statistics.median(a), statistics.median(t)
            medians.append((ma, mt))
            rows["median step"].append(ma / mt)
            rows["p10 step"].append(p10(a) / p10(t))
            first = "accelerate" if i % 2 == 0 else "torch"
            print(f"  round {i + 1} ({first} first): step median accelerate {ma * 1e3:7.2f} ms, "
                  f"torch {mt * 1e3:7.2f} ms, ratio {ma / mt:.4f}", flush=True)  # fmt: skip
    print(summary(rows, medians, "accelerate / torch"))


if __name__ == "__main__":
    main()
