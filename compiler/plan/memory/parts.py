"""The constants and records the memory estimate counts in. No torch.

One job: what every module of the estimate shares: the bytes of each precision, the optimizer's
fp32 states, DeepSpeed's bucket and gathering defaults, the share of memory called tight, the
variable that stands for this host's memory; and the records: a Part (one thing a device holds,
its bytes and how they are counted) and the Memory they add up to, with its peak and fit.
"""

from __future__ import annotations

from ...records import frozen

GB = 1e9  # decimal, as the vendors state memory_gb
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
FP32 = 4
OPTIMIZER_STATES = {"adamw": 2, "adam": 2}  # fp32 tensors per parameter (exp_avg, exp_avg_sq)
ZERO_REDUCE_BUCKET = 500_000_000  # DeepSpeed's default reduce_bucket_size, in elements
ZERO3_LIVE = 1_000_000_000  # DeepSpeed's default stage3_max_live_parameters
ZERO3_PREFETCH = 50_000_000  # DeepSpeed's default stage3_prefetch_bucket_size, in elements
TIGHT = 0.9  # a total above this share of the device's memory leaves little for the runtime
HOST_MEMORY_VARIABLE = "BENCHC_HOST_MEMORY_BYTES"  # stands for this host's memory (tests, other hosts)


@frozen
class Part:
    name: str
    bytes: float
    formula: str  # how it is counted, for the reader


@frozen
class Memory:
    parts: tuple[Part, ...]
    capacity: float | None  # bytes of the target's memory; None: unknown
    activations_off: float | None = None  # training: activations without checkpointing
    activations_on: float | None = None  # ... and with it
    build: float = 0.0  # the model built whole before it is sharded or split
    host: float | None = None  # cpu: this host's memory, of which capacity is one process's share
    processes: int = 1  # cpu: the processes of one node, which share the host's memory
    phase: str = ""  # training: the moment of the step the parts are held together at (its peak)

    @property
    def steady(self) -> float:
        """The parts held together while the timed work runs."""
        return sum(p.bytes for p in self.parts)

    @property
    def total(self) -> float:
        """The peak: the steady state, or the build before it where that is larger."""
        return max(self.steady, self.build)

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.total <= self.capacity

    @property
    def tight(self) -> bool:
        return bool(self.capacity) and TIGHT * self.capacity < self.total <= self.capacity

    def part(self, name: str) -> float:
        return sum(p.bytes for p in self.parts if p.name == name)
