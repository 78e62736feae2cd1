"""Three outcomes for an interval against a tolerance, the smallest change a run could detect, and the repeats a
decision would need.

``pass`` only when the whole confidence interval lies inside the tolerance, ``fail`` when it lies wholly beyond,
``inconclusive`` otherwise: an interval that straddles the limit is no evidence either way, so it never passes
(Go's benchstat prints "~" for such a difference rather than a verdict; Chromium's Pinpoint adds repetitions
until its test decides). The minimum detectable effect (MDE) is the true change this run would find beyond zero
with 80% power at the interval's confidence, ``(t_{1-a/2} + t_{power}) * se``; the repeats estimate is the
smallest count whose interval, at the same spread, would no longer reach from the estimate to the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from hybridbench.metrics.stats import RelativeChange, t_quantile

__all__ = ["POWER", "Judgement", "Outcome", "judge", "mde", "repeats_needed"]

Outcome = Literal["pass", "fail", "inconclusive"]
POWER = 0.8  # of the minimum detectable effect
_MAX_REPEATS = 1000  # past this an estimate is "never, at this spread"


@dataclass(frozen=True, slots=True)
class Judgement:
    status: Outcome
    estimate: float
    low: float
    high: float
    limit: float  # the tolerance's edge on the estimate's scale (+0.10: at most 10% slower; -0.10: at most 10% fewer)
    mde: float  # the smallest change this run could have detected (NaN: the interval has no spread model)
    repeats_needed: int | None  # to decide at this spread (the current count when decided; None: unknown)

    def describe(self, fmt: str = "{:+.1%}") -> str:
        """``+4.1% (CI -3.0% .. +11.2%), MDE 9.5%, ~6 repeats to decide``: what the report and compare print."""
        out = f"{fmt.format(self.estimate)} (CI {fmt.format(self.low)} .. {fmt.format(self.high)})"
        if math.isfinite(self.mde):
            out += f", MDE {fmt.format(self.mde).lstrip('+')}"
        if self.status == "inconclusive":
            out += (f", ~{self.repeats_needed} repeats to decide" if self.repeats_needed is not None
                    else ", repeats to decide: unknown at this spread")
        return out


def _scaled(ch: RelativeChange, value: float) -> float:
    """A change on the scale the interval's se lives on (log(1 + change) for Welch's)."""
    if not ch.log_scale:
        return value
    return math.log1p(value) if value > -1 else -math.inf


def mde(ch: RelativeChange, *, confidence: float, power: float = POWER) -> float:
    if not (math.isfinite(ch.se) and math.isfinite(ch.df) and ch.df > 0):
        return math.nan
    width = (t_quantile(1 - (1 - confidence) / 2, ch.df) + t_quantile(power, ch.df)) * ch.se
    return math.expm1(width) if ch.log_scale else width


def repeats_needed(ch: RelativeChange, limit: float, *, confidence: float) -> int | None:
    """The smallest repeat count (a side) whose interval half-width falls short of the estimate's distance to the
    limit, at this run's spread per repeat; None without a spread model or with the estimate on the limit."""
    if not (math.isfinite(ch.se) and ch.n >= 2 and math.isfinite(ch.estimate)):
        return None
    distance = abs(_scaled(ch, limit) - _scaled(ch, ch.estimate))
    if not distance > 0 or not math.isfinite(distance):
        return None
    per_repeat = ch.se * math.sqrt(ch.n)  # the spread one repeat (a side) contributes
    # Welch's df grows with both sides: about 2 (n - 1) at equal spreads; a paired t has n - 1.
    df_of = (lambda n: 2.0 * (n - 1)) if ch.log_scale else (lambda n: float(n - 1))
    for n in range(2, _MAX_REPEATS + 1):
        if t_quantile(1 - (1 - confidence) / 2, df_of(n)) * per_repeat / math.sqrt(n) < distance:
            return n
    return None


def judge(ch: RelativeChange, *, limit: float, worse: Literal["above", "below"], confidence: float) -> Judgement:
    """``worse="above"``: the tolerance is ``change <= limit`` (TTFT); ``"below"``: ``change >= limit``
    (throughput, with a negative limit). NaN anywhere decides nothing."""
    finite = all(math.isfinite(v) for v in (ch.estimate, ch.low, ch.high))
    status: Outcome
    if not finite:
        status = "inconclusive"
    elif worse == "above":
        status = "pass" if ch.high <= limit else "fail" if ch.low > limit else "inconclusive"
    else:
        status = "pass" if ch.low >= limit else "fail" if ch.high < limit else "inconclusive"
    needed = ch.n if status != "inconclusive" and ch.n else repeats_needed(ch, limit, confidence=confidence)
    return Judgement(status, ch.estimate, ch.low, ch.high, limit, mde(ch, confidence=confidence), needed)
