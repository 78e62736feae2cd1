"""compare's settings and its rows: one ``Delta`` per (metric, workload, arm), and the three ways one is made — an
interval judged against a tolerance, a row that cannot decide (``inconclusive``), a row with nothing to judge
(``skip``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hybridbench.checks.base import Status
from hybridbench.metrics.decision import judge
from hybridbench.metrics.stats import RelativeChange

__all__ = ["CompareCfg", "Delta", "Subject", "interval_row", "skip_row", "undecided_row"]


@dataclass(frozen=True, slots=True)
class CompareCfg:
    ttft_regression: float = 0.10  # fail when the whole CI of the mean TTFT change is above +10%
    throughput_regression: float = 0.10  # fail when the whole CI of the request throughput change is below -10%
    max_hit_rate_drop: float = 0.02  # fail when the whole CI of the token hit rate change is below -0.02
    confidence: float = 0.95
    bootstrap_samples: int = 1000
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Delta:
    metric: str  # ttft | throughput | token_hit_rate | survival
    workload: str
    arm: str
    status: Status
    base: float | None
    candidate: float | None
    change: float | None  # relative for ttft and throughput, absolute for token_hit_rate
    low: float | None
    high: float | None
    expected: str
    detail: str
    limit: float | None = None  # the tolerance's edge on the change's scale (+0.10, -0.10, -0.02)
    mde: float | None = None  # the smallest change this comparison could have detected
    repeats_needed: int | None = None  # a side, to decide at this spread


Subject = tuple[str, str, str]  # (metric, workload, arm)


def interval_row(subject: Subject, base: float, cand: float, ch: RelativeChange, *, limit: float, expected: str,
                 higher_is_worse: bool, relative: bool, confidence: float) -> Delta:
    """Three outcomes; a NaN anywhere decides nothing (inconclusive), never a pass."""
    j = judge(ch, limit=limit if higher_is_worse else -limit, worse="above" if higher_is_worse else "below",
              confidence=confidence)
    shown = "{:+.1%}" if relative else "{:+.3f}"

    def num(v: float) -> float | None:
        return v if math.isfinite(v) else None

    return Delta(*subject, j.status, base, cand, num(ch.estimate), num(ch.low), num(ch.high), expected,
                 j.describe(shown), j.limit, num(j.mde), j.repeats_needed)


def undecided_row(subject: Subject, expected: str, why: str, *, limit: float, base: float | None = None,
                  cand: float | None = None) -> Delta:
    """A comparison that cannot decide (too few repeats a side): inconclusive, exit 1 — never skipped into a pass."""
    return Delta(*subject, "inconclusive", base, cand, None, None, None, expected, why, limit)


def skip_row(subject: Subject, expected: str, why: str, *, base: float | None = None,
             cand: float | None = None) -> Delta:
    return Delta(*subject, "skip", base, cand, None, None, None, expected, why)
