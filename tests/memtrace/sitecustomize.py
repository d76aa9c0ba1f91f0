"""A test instrument, not part of benchc: the peak bytes of live CPU tensor storages in each
rank of a generated program, and the dtypes its gradient reduce-scatters carry.

tests/test_run_cpu.py puts this folder on PYTHONPATH with BENCHC_TEST_MEMTRACE=<prefix> set;
Python then imports it at start-up in every process, and each rank (RANK set) writes
<prefix>.<rank>.json at exit. It counts every storage an operator creates (a dispatch mode
below autograd and autocast, so autocast's weight casts and FSDP2's all-gathers count) until
its storage is freed, and follows storage resizes (FSDP2 frees unsharded parameters by
resizing them to 0). The process's resident set, which the CPU program reports, is too
coarse for this: the allocator keeps freed pages and the baseline is hundreds of MB.
"""

import atexit
import json
import os

_PREFIX = os.environ.get("BENCHC_TEST_MEMTRACE")

if _PREFIX:
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class _PeakStorage(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live = {}  # storage id -> (weak reference, bytes)
            self.current = 0
            self.peak = 0
            self.calls = 0
            self.reduced = set()

        def _sweep(self):
            for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
                self.current -= self.live.pop(key)[1]
            self.peak = max(self.peak, self.current)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(t.__name__ == "DTensor" for t in types):
                return NotImplemented  # let DTensor unwrap into local ops, then count those
            if "reduce_scatter" in str(func):
                self.reduced |= {str(t.dtype) for t in tree_leaves(args) if isinstance(t, torch.Tensor)}
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
        with open(f"{_PREFIX}.{rank}.json", "w") as stream:
            json.dump({"peak_bytes": _mode.peak, "reduce_scatter_dtypes": sorted(_mode.reduced)}, stream)

    atexit.register(_write)
