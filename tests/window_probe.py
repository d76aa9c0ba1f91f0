"""Run a generated program in this process and count host synchronisations in its measured
windows: a TorchDispatchMode counts `aten._local_scalar_dense` (what `.item()`, `float(t)`,
`bool(t)` and `tolist()` of a device tensor dispatch to) from a window's entry to its exit.

    python tests/window_probe.py PROGRAM.py METRICS.json COUNTS.json

The program is the generated bench.py, unchanged; only its window classes are wrapped so the
counter runs exactly while a window is open (after its own entry synchronisation, before its
exit's): training's MeasuredWindow (the measured steps), generation's TimedCall (each timed
generate call, one-token and full). COUNTS.json has the totals and each window's syncs.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SYNCS = {torch.ops.aten._local_scalar_dense.default}


def optimizer_step_counter(tensor) -> bool:
    """torch's non-fused optimizers keep each parameter's step count as a 0-dim tensor on the
    host on every device (state["step"] is a CPU tensor unless fused or capturable), and
    read it there: on a GPU that waits for nothing, so it is counted apart, not as a sync."""
    if tensor.dim() != 0 or tensor.device.type != "cpu":
        return False
    return any("/torch/optim/" in frame.filename for frame in traceback.extract_stack())


class SyncCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.syncs = 0
        self.host_step_counts = 0
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        if func in SYNCS:
            if optimizer_step_counter(args[0]):
                self.host_step_counts += 1
            else:
                self.syncs += 1
        return func(*args, **(kwargs or {}))


def main(program: str, metrics: str, counts: str) -> int:
    spec = importlib.util.spec_from_file_location("bench_under_probe", program)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    counter = SyncCounter()
    # The counter must see a sync where there is one, or a zero would prove nothing.
    with counter:
        float(torch.ones(()) + 1)
    assert counter.syncs == 1, "the counter does not see .item()"
    counter.syncs = counter.ops = 0
    windows = []

    def counted(window):
        class Counted(window):
            def __enter__(self):
                entered = super().__enter__()
                self.syncs_before = counter.syncs
                counter.__enter__()
                return entered

            def __exit__(self, *exc):
                counter.__exit__(*exc)
                windows.append(counter.syncs - self.syncs_before)
                return super().__exit__(*exc)

        return Counted

    for name in ("MeasuredWindow", "TimedCall"):
        if hasattr(module, name):
            setattr(module, name, counted(getattr(module, name)))
    code = module.main(["--metrics", metrics])
    with open(counts, "w") as out:
        json.dump(
            {
                "syncs": counter.syncs,
                "host_step_counts": counter.host_step_counts,
                "ops": counter.ops,
                "windows": len(windows),
                "syncs_per_window": windows,
            },
            out,
        )
    return code


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
