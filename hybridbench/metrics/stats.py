"""Percentiles (numpy's linear interpolation) and confidence intervals for relative changes.

Per-request samples (TTFTs: dozens to thousands) get a seeded percentile bootstrap. Per-trial samples
(one throughput per repeat: usually 3) get a paired t-interval instead: a bootstrap of three values
can only recombine those three, so its interval is far too narrow and noise alone would fail runs.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from workloads.stats import percentile

T = TypeVar("T")
# A standard error of an absolute difference of rates (0..1) below this is floating-point rounding, not spread: leads
# of 5 points in every repeat came out 1e-17 apart, an interval that width passed as if it had measured a spread.
NO_SPREAD = 1e-12

__all__ = [
    "NO_SPREAD",
    "RelativeChange",
    "bootstrap_relative_change",
    "paired_bootstrap",
    "paired_difference",
    "paired_relative_change",
    "percentile",
    "t_quantile",
    "welch_difference",
    "welch_relative_change",
]


@dataclass(frozen=True, slots=True)
class RelativeChange:
    estimate: float  # mean(candidate) / mean(baseline) - 1 (an absolute difference where a caller says so)
    low: float
    high: float
    # What the interval rests on, for the minimum detectable effect and the repeats a decision needs
    # (hybridbench.metrics.decision): the standard error and degrees of freedom of a t-interval, the units it
    # pairs or counts (repeats). NaN / 0 for a bootstrap, whose width has no such model.
    se: float = math.nan
    df: float = math.nan
    n: int = 0
    log_scale: bool = False  # se and df describe log(1 + change) (Welch's), not the change itself


def bootstrap_relative_change(
    baseline: Sequence[float], candidate: Sequence[float], *, samples: int, confidence: float, seed: int
) -> RelativeChange:
    """Percentile bootstrap of mean(candidate)/mean(baseline) - 1, resampling each side independently."""
    if not baseline or not candidate:
        return RelativeChange(math.nan, math.nan, math.nan)
    base_mean = statistics.fmean(baseline)
    estimate = statistics.fmean(candidate) / base_mean - 1 if base_mean else math.nan
    if len(baseline) < 2 and len(candidate) < 2:
        return RelativeChange(estimate, estimate, estimate)
    rng = random.Random(seed)
    stats = []
    for _ in range(samples):
        b = statistics.fmean(rng.choices(baseline, k=len(baseline)))
        c = statistics.fmean(rng.choices(candidate, k=len(candidate)))
        if b:
            stats.append(c / b - 1)
    alpha = (1 - confidence) / 2 * 100
    return RelativeChange(estimate, percentile(stats, alpha), percentile(stats, 100 - alpha))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile (bisection on the CDF): t_quantile(0.975, 2) = 4.3027."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2.0


def paired_relative_change(
    baseline: Sequence[float], candidate: Sequence[float], *, confidence: float
) -> RelativeChange:
    """t-interval of the mean per-repeat change ``candidate[i] / baseline[i] - 1``.

    Arms run interleaved within each repeat (A, B, A, B on the same machine), so what drifts between
    repeats moves both arms of a repeat alike; pairing by repeat removes it, as a paired test does.
    Only the first ``min(len)`` repeats pair (a run cut short by a dead server has fewer).
    """
    # A repeat with no value (NaN: a trial with no records) pairs with nothing; statistics.stdev raises on NaN.
    ratios = [c / b - 1 for b, c in zip(baseline, candidate, strict=False)
              if b and math.isfinite(b) and math.isfinite(c)]
    if len(ratios) < 2:  # no interval from fewer than two repeats
        return RelativeChange(math.nan, math.nan, math.nan)
    estimate = statistics.fmean(ratios)
    se = statistics.stdev(ratios) / math.sqrt(len(ratios))
    half = t_quantile(1 - (1 - confidence) / 2, len(ratios) - 1) * se
    return RelativeChange(estimate, estimate - half, estimate + half, se, len(ratios) - 1, len(ratios))


def welch_relative_change(
    baseline: Sequence[float], candidate: Sequence[float], *, confidence: float
) -> RelativeChange:
    """Welch t-interval of mean(candidate)/mean(baseline) - 1 for two *unpaired* sets of per-repeat values.

    Two separate runs (main last night, a pull request now) share no repeats to pair, so each side's
    spread counts. The interval is built on the log of the ratio (delta method: var(log mean) ~
    var/(n mean^2)) with Welch-Satterthwaite degrees of freedom, then mapped back, so it stays above -100%.
    """
    baseline, candidate = [v for v in baseline if math.isfinite(v)], [v for v in candidate if math.isfinite(v)]
    nb, nc = len(baseline), len(candidate)
    if nb < 2 or nc < 2:
        return RelativeChange(math.nan, math.nan, math.nan)
    mb, mc = statistics.fmean(baseline), statistics.fmean(candidate)
    if mb <= 0 or mc <= 0:
        return RelativeChange(math.nan, math.nan, math.nan)
    vb = statistics.variance(baseline) / (nb * mb * mb)
    vc = statistics.variance(candidate) / (nc * mc * mc)
    log_ratio = math.log(mc / mb)
    n = min(nb, nc)
    if vb + vc == 0:
        return RelativeChange(mc / mb - 1, mc / mb - 1, mc / mb - 1, 0.0, nb + nc - 2, n, log_scale=True)
    df = (vb + vc) ** 2 / (vb * vb / (nb - 1) + vc * vc / (nc - 1))
    half = t_quantile(1 - (1 - confidence) / 2, df) * math.sqrt(vb + vc)
    return RelativeChange(mc / mb - 1, math.expm1(log_ratio - half), math.expm1(log_ratio + half),
                          math.sqrt(vb + vc), df, n, log_scale=True)



def paired_difference(
    baseline: Sequence[float], candidate: Sequence[float], *, confidence: float, exact: bool
) -> RelativeChange:
    """t-interval of the mean per-repeat *absolute* difference ``candidate[i] - baseline[i]`` (hit rates: a
    ratio of rates near 0 says nothing), paired by repeat as ``paired_relative_change`` is. Differences that agree
    exactly give a zero-width interval only when ``exact`` (the caller knows the repeats cannot differ: a
    deterministic engine, or hits alike request by request); otherwise the interval is NaN: two measured repeats can
    agree by chance, and a spread of 0 from them is no evidence the next one would."""
    diffs = [c - b for b, c in zip(baseline, candidate, strict=False) if math.isfinite(b) and math.isfinite(c)]
    if len(diffs) < 2:
        return RelativeChange(math.nan, math.nan, math.nan)
    estimate = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    if se <= NO_SPREAD:
        return _exactly(estimate, exact, len(diffs) - 1, len(diffs))
    half = t_quantile(1 - (1 - confidence) / 2, len(diffs) - 1) * se
    return RelativeChange(estimate, estimate - half, estimate + half, se, len(diffs) - 1, len(diffs))


def _exactly(estimate: float, exact: bool, df: float, n: int) -> RelativeChange:
    """A zero spread (``se`` 0.0): the estimate itself where the repeats are known to agree, else no interval."""
    return RelativeChange(estimate, *((estimate, estimate) if exact else (math.nan, math.nan)), 0.0, df, n)


def welch_difference(
    baseline: Sequence[float], candidate: Sequence[float], *, confidence: float, exact: bool
) -> RelativeChange:
    """Welch t-interval of the *absolute* difference mean(candidate) - mean(baseline) for two unpaired sets of
    per-repeat values (two runs' hit rates); NaN below two values a side. Its ``df`` is Welch-Satterthwaite's, so
    ``repeats_needed`` (which assumes n - 1 for an absolute change) errs toward more repeats. Every repeat alike on
    both sides gives a zero-width interval only when ``exact`` (as ``paired_difference``), else NaN bounds."""
    baseline, candidate = [v for v in baseline if math.isfinite(v)], [v for v in candidate if math.isfinite(v)]
    nb, nc = len(baseline), len(candidate)
    if nb < 2 or nc < 2:
        return RelativeChange(math.nan, math.nan, math.nan)
    estimate = statistics.fmean(candidate) - statistics.fmean(baseline)
    vb, vc = statistics.variance(baseline) / nb, statistics.variance(candidate) / nc
    n = min(nb, nc)
    if math.sqrt(vb + vc) <= NO_SPREAD:  # every repeat alike on both sides: exact, if the repeats could not differ
        return _exactly(estimate, exact, nb + nc - 2, n)
    df = (vb + vc) ** 2 / (vb * vb / (nb - 1) + vc * vc / (nc - 1))
    half = t_quantile(1 - (1 - confidence) / 2, df) * math.sqrt(vb + vc)
    return RelativeChange(estimate, estimate - half, estimate + half, math.sqrt(vb + vc), df, n)


def paired_bootstrap(
    items: Sequence[T], statistic: Callable[[Sequence[T]], float], *, samples: int, confidence: float, seed: int
) -> RelativeChange:
    """Percentile bootstrap of ``statistic`` over paired items, resampled together.

    Two runs of one plan send byte-identical requests, so request i of repeat r pairs with its twin in the
    other run: resampling pairs keeps what both share (a long prompt is slow in both), which a bootstrap
    of each side alone would count as noise.
    """
    if not items:
        return RelativeChange(math.nan, math.nan, math.nan)
    estimate = statistic(items)
    rng = random.Random(seed)
    stats = [v for _ in range(samples) if not math.isnan(v := statistic(rng.choices(items, k=len(items))))]
    if not stats:
        return RelativeChange(estimate, math.nan, math.nan)
    alpha = (1 - confidence) / 2 * 100
    return RelativeChange(estimate, percentile(stats, alpha), percentile(stats, 100 - alpha))
