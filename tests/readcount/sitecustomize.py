"""A test instrument, not part of benchc: the bytes each rank of a generated program reads from
safetensors files, counted by wrapping safetensors' reader.

tests/test_causal_lm.py puts this folder on PYTHONPATH with BENCHC_TEST_READCOUNT=<prefix> set;
Python imports it at start-up in every process. It replaces `safetensors.safe_open` (before the
program imports it) with a wrapper whose tensors and slices count the bytes they return, and
each rank (RANK set) writes <prefix>.<rank>.json at exit: {"bytes": N, "tensors": K, "largest": L}
(L: the bytes of the largest single read). tests/warm_launch.py starts its warm process with
BENCHC_TEST_READCOUNT=- (armed before any library imports safetensors, writing nothing): each
rank forked from it writes under the prefix its own environment names at its exit.
"""

import atexit
import json
import os

_PREFIX = os.environ.get("BENCHC_TEST_READCOUNT")

if _PREFIX:
    import safetensors

    _real_open = safetensors.safe_open
    _counts = {"bytes": 0, "tensors": 0, "largest": 0}

    def _count(tensor):
        size = tensor.numel() * tensor.element_size()
        _counts["bytes"] += size
        _counts["tensors"] += 1
        _counts["largest"] = max(_counts["largest"], size)
        return tensor

    class _Slice:
        def __init__(self, inner):
            self._inner = inner

        def __getitem__(self, index):
            return _count(self._inner[index])

        def __getattr__(self, name):
            return getattr(self._inner, name)

    class _CountingOpen:
        def __init__(self, *args, **kwargs):
            self._inner = _real_open(*args, **kwargs)

        def __enter__(self):
            self._inner.__enter__()
            return self

        def __exit__(self, *exc):
            return self._inner.__exit__(*exc)

        def get_tensor(self, name):
            return _count(self._inner.get_tensor(name))

        def get_slice(self, name):
            return _Slice(self._inner.get_slice(name))

        def __getattr__(self, name):
            return getattr(self._inner, name)

    safetensors.safe_open = _CountingOpen

    @atexit.register
    def _write() -> None:
        rank, prefix = os.environ.get("RANK"), os.environ.get("BENCHC_TEST_READCOUNT")
        if rank is not None and prefix and prefix != "-":
            with open(f"{prefix}.{rank}.json", "w") as file:
                json.dump(_counts, file)
