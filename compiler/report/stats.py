"""Summary statistics for repeated trials: median, a 95% confidence interval, noise.

A positive quantity (a throughput, a time) gets its interval from the logarithms of the trials
(the geometric mean's, Student's t): it stays above zero however few or spread the trials are,
where the mean's could read "289 [-355, 934]"."""

from __future__ import annotations

import math
import statistics

from ..records import frozen

NOISY_CV = 0.05  # a coefficient of variation above 5% marks a point as noisy
CI_TRIALS = 5  # fewer trials give a 95% interval too wide to mean much: a chart shows their range

# Two-sided 95% quantiles of Student's t by degrees of freedom; beyond the table, 1.96.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
        17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000,
        120: 1.980}  # fmt: skip


def t95(df: int) -> float:
    if df in _T95:
        return _T95[df]
    smaller = [k for k in _T95 if k < df]
    return _T95[max(smaller)] if df <= 120 else 1.960  # the next smaller df: a wider interval


@frozen
class Summary:
    n: int
    median: float
    mean: float
    ci_low: float | None  # 95% confidence interval (t), None for one trial: of the geometric
    ci_high: float | None  # mean where every value is positive (it stays positive), else the mean
    cv: float | None  # coefficient of variation (stdev / mean)
    low: float | None = None  # the smallest and largest trial (None for one trial)
    high: float | None = None

    @property
    def bar(self) -> tuple[float, float] | None:
        """(low, high) a chart draws around the median: the 95% interval from CI_TRIALS
        trials on, the trials' range below that (Student's t with 1 degree of freedom is
        12.7: two trials' interval spans most of an axis), None for one trial."""
        if self.n < 2:
            return None
        if self.n >= CI_TRIALS and self.ci_low is not None and self.ci_high is not None:
            return self.ci_low, self.ci_high
        return self.low, self.high

    @property
    def noisy(self) -> bool:
        return self.cv is not None and self.cv > NOISY_CV


def summarize(values: list[float]) -> Summary:
    if not values:
        raise ValueError("no values")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Summary(1, values[0], mean, None, None, None)
    stdev = statistics.stdev(values)
    t = t95(len(values) - 1)
    cv = stdev / mean if mean else None
    if all(v > 0 for v in values):  # throughputs and times: on the logarithm, so never below 0
        logs = [math.log(v) for v in values]
        centre, half = statistics.fmean(logs), t * statistics.stdev(logs) / math.sqrt(len(values))
        low, high = math.exp(centre - half), math.exp(centre + half)
    else:
        half = t * stdev / math.sqrt(len(values))
        low, high = mean - half, mean + half
    return Summary(len(values), statistics.median(values), mean, low, high, cv, min(values), max(values))
