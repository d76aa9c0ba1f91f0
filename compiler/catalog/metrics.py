"""The headline metrics a spec can name (`measure.metric`): one table, read by the plan, the
generated programs, the console and the reports, and each metric's value read from a metrics
file.

Each metric says which workloads measure it (the first of a workload's metrics is its
default), whether lower is better, where its value sits in a metrics file (a section and
key; None: the job's throughput), the unit it is shown in, and the unit of the program's
throughput line, which a latency metric's program also prints.
"""

from __future__ import annotations

from ..figures import sig
from ..records import frozen


@frozen
class Metric:
    name: str
    label: str
    lower_is_better: bool
    section: str | None  # where the value sits in a metrics file; None: the job throughput
    key: str | None
    unit: str | None  # the headline's unit where it is a latency; None: the throughput's own
    throughput_unit: str  # the unit of the program's throughput (images/s, tokens/s, ...)
    workloads: tuple[tuple[str, str], ...]  # (workload, model kind) whose programs measure it

    @property
    def shown_unit(self) -> str:
        """The unit the headline is shown in: its own, or the throughput's."""
        return self.unit or self.throughput_unit


_TRAIN_MMDIT, _TRAIN_CAUSAL_LM = ("train", "mmdit"), ("train", "causal_lm")
_INFER_SD3, _INFER_CAUSAL_LM = ("infer", "sd3"), ("infer", "causal_lm")
_TRAIN_FLUX, _INFER_FLUX = ("train", "flux"), ("infer", "flux")

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("images_per_s", "throughput", False, None, None, None, "images/s",
               (_TRAIN_MMDIT, _TRAIN_FLUX)),
        Metric("tokens_per_s", "throughput", False, None, None, None, "tokens/s", (_TRAIN_CAUSAL_LM,)),
        Metric("output_tokens_per_s", "throughput", False, None, None, None, "output tokens/s",
               (_INFER_CAUSAL_LM,)),
        Metric("s_per_image", "seconds per image", True, "pipeline", "s_per_image", "s/image", "images/s",
               (_INFER_SD3, _INFER_FLUX)),
        Metric("ttft_s", "time to first token", True, "generation", "ttft_s", "s", "output tokens/s",
               (_INFER_CAUSAL_LM,)),
        Metric("tpot_s", "time per output token", True, "generation", "tpot_s", "s", "output tokens/s",
               (_INFER_CAUSAL_LM,)),
    )
}  # fmt: skip


def metrics_of(workload: str, kind: str) -> tuple[str, ...]:
    """The metrics a workload's program measures, its default first."""
    return tuple(name for name, m in METRICS.items() if (workload, kind) in m.workloads)


def metric_of(name: str | None) -> Metric:
    return METRICS.get(name or "", METRICS["images_per_s"])


def value_of(metric: Metric, metrics: dict) -> float | None:
    if metric.section is None:
        return (metrics.get("throughput") or {}).get("job")
    return (metrics.get(metric.section) or {}).get(metric.key)


def unit_of(metric: Metric, metrics: dict) -> str:
    return metric.unit or (metrics.get("throughput") or {}).get("unit", "")


def headline(metrics: dict, metric_name: str | None) -> str:
    """'0.174 s/image' or '1,250 images/s': the headline of one run, for the console."""
    metric = metric_of(metric_name)
    value = value_of(metric, metrics)
    return "-" if value is None else f"{sig(value)} {unit_of(metric, metrics)}"
