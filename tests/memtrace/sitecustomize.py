"""A test instrument, not part of benchc: the peak bytes of live CPU tensor storages in each
rank of a generated program, and the dtypes its gradient reduce-scatters carry.

tests/memory_checks.py puts this folder on PYTHONPATH with BENCHC_TEST_MEMTRACE=<prefix> set;
Python then imports it at start-up in every process, and each rank (RANK set) writes
<prefix>.<rank>.json at exit. It counts every storage an operator creates (a dispatch mode
below autograd and autocast, so autocast's weight casts and FSDP2's all-gathers count) until
its storage is freed, and follows storage resizes (FSDP2 frees unsharded parameters by
resizing them to 0), over the whole run. It also records baseline_bytes, what was live when
the program's main() began: the tensors libraries make as they are imported, which no plan
holds. The CPU program's own peak_memory_bytes (its adapter's StoragePeak) counts the same
way, from the device's creation to the measured window.

BENCHC_TEST_MEMTRACE_DETAIL=1 adds where the peak came (`peak_at`: the program's functions,
innermost first, and the innermost library frame) and what was live then, grouped by where
each storage was made (`at_peak`, MB): what a mismatch with the estimate is read from. It
walks the stack for every operator: slow, for diagnosis only.
"""

import atexit
import json
import os
import sys

_PREFIX = os.environ.get("BENCHC_TEST_MEMTRACE")
_DETAIL = os.environ.get("BENCHC_TEST_MEMTRACE_DETAIL") == "1"

if _PREFIX:
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    def _where() -> tuple[list[str], str | None]:
        """The program's frames (function:line, innermost first) and the innermost frame of
        a library other than torch's own machinery (torch.distributed and torch.optim count)."""
        frame, program, library = sys._getframe(2), [], None
        while frame is not None:
            name = frame.f_code.co_filename
            if name.endswith("bench.py"):
                program.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
            elif (
                library is None
                and "site-packages" in name
                and ("/torch/" not in name or "/torch/distributed/" in name or "/torch/optim/" in name)
            ):
                library = f"{name.split('site-packages/')[1]}:{frame.f_code.co_name}:{frame.f_lineno}"
            frame = frame.f_back
        return program, library

    class _PeakStorage(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live = {}  # storage id -> (weak reference, bytes)
            self.current = 0
            self.peak = 0
            self.calls = 0
            self.reduced = set()
            self.baseline = None  # live bytes when main() began
            self.made = {}  # detail: storage id -> where it was made
            self.at_peak, self.peak_at = {}, None

        def _sweep(self):
            for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
                self.current -= self.live.pop(key)[1]
                self.made.pop(key, None)
            if _DETAIL and self.current > self.peak:
                program, library = _where()
                self.peak_at = f"{' < '.join(program)} | {library}"
                totals = {}
                for key, (_, size) in self.live.items():
                    totals[self.made.get(key, "?")] = totals.get(self.made.get(key, "?"), 0) + size
                self.at_peak = {
                    k: round(v / 1e6, 4) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])
                }
            self.peak = max(self.peak, self.current)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(t.__name__ == "DTensor" for t in types):
                return NotImplemented  # let DTensor unwrap into local ops, then count those
            if "reduce_scatter" in str(func):
                self.reduced |= {str(t.dtype) for t in tree_leaves(args) if isinstance(t, torch.Tensor)}
            if self.baseline is None and any(f.startswith("main:") for f in _where()[0]):
                self._sweep()
                self.baseline = self.current
            out = func(*args, **(kwargs or {}))
            grew = False
            for tensor in tree_leaves(out):
                if type(tensor) is torch.Tensor and tensor.device.type == "cpu":
                    storage = tensor.untyped_storage()
                    ref = StorageWeakRef(storage)
                    if ref.cdata not in self.live:
                        self.live[ref.cdata] = (ref, storage.nbytes())
                        self.current += storage.nbytes()
                        grew = True
                        if _DETAIL:
                            program, library = _where()
                            self.made[ref.cdata] = (
                                f"{program[0] if program else None} {func.__name__} {library}"
                            )
            self.calls += 1
            if (grew and self.current > self.peak) or self.calls % 64 == 0:
                self._sweep()
            return out

    _mode = _PeakStorage()
    _resize = torch.UntypedStorage.resize_

    def _tracked_resize(storage, size):
        key = StorageWeakRef(storage).cdata
        result = _resize(storage, size)
        entry = _mode.live.get(key)
        if entry is not None:
            _mode.current += storage.nbytes() - entry[1]
            _mode.live[key] = (entry[0], storage.nbytes())
            if _mode.current > _mode.peak:
                _mode._sweep()
        return result

    torch.UntypedStorage.resize_ = _tracked_resize
    _mode.__enter__()

    def _write():
        rank = os.environ.get("RANK")
        if rank is None:
            return  # the launcher (torchrun) itself
        record = {"peak_bytes": _mode.peak, "baseline_bytes": _mode.baseline or 0,
                  "reduce_scatter_dtypes": sorted(_mode.reduced)}  # fmt: skip
        if _DETAIL:
            record.update(peak_at=_mode.peak_at, at_peak=_mode.at_peak)
        with open(f"{_PREFIX}.{rank}.json", "w") as stream:
            json.dump(record, stream)

    atexit.register(_write)
