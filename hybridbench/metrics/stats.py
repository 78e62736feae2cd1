"""Percentiles (numpy's linear interpolation) and a seeded bootstrap CI for relative changes."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from workloads.stats import percentile

__all__ = ["RelativeChange", "bootstrap_relative_change", "percentile"]


@dataclass(frozen=True, slots=True)
class RelativeChange:
    estimate: float  # mean(candidate) / mean(baseline) - 1
    low: float
    high: float


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
