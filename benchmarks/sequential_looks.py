"""The error rates of adaptive repeats' stopping rule, simulated: why the looks' levels are what they are.

Per-repeat paired changes are drawn from a normal distribution (mean ``true``, sd ``sd``: what the paired ttft and
throughput checks see, one value per repeat) and judged as the checks judge them: the paired t-interval at the
look's confidence; pass when it lies wholly at or below ``limit``, fail when wholly above, else one more repeat
(up to ``repeats_max``). Four designs are compared at the same nominal confidence (K looks possible):

- fixed: ``repeats_max`` repeats, one test at the end at the nominal level;
- naive: a look after every repeat from ``repeats`` on, each at the nominal level;
- split: a look after every repeat from ``repeats`` on, each at 1 - (1 - confidence) / K;
- spend (what hybridbench does, hybridbench.plan.repeats): half the error at the last look, half split evenly over
  the K - 1 earlier ones.

At ``true == limit`` (a regression exactly at the tolerance) any pass is a false pass; at ``true == 0`` any fail is
a false fail. The interval functions are hybridbench's own (hybridbench.metrics.stats.paired_relative_change).

    python benchmarks/sequential_looks.py [--sd 0.05] [--limit 0.10] [--repeats 3] [--repeats-max 10] [--paths 4000]
"""

from __future__ import annotations

import functools
import random
import sys
from collections.abc import Sequence

from whole_command import count, fraction, positive  # a sibling: run as a script

from hybridbench.errors import OneLineParser
from hybridbench.metrics import stats
from hybridbench.metrics.stats import paired_relative_change

# The intervals are the checks' own; only the t quantile's bisection is memoised (one per level and df), in this
# process, so that thousands of simulated runs take seconds.
stats.t_quantile = functools.lru_cache(maxsize=None)(stats.t_quantile)


def _judge(ratios: Sequence[float], limit: float, confidence: float) -> str:
    ch = paired_relative_change([1.0] * len(ratios), [1 + r for r in ratios], confidence=confidence)
    return "pass" if ch.high <= limit else "fail" if ch.low > limit else "open"


def look_level(design: str, confidence: float, look: int, looks: int) -> float:
    """The confidence at look ``look`` (1-based) of ``looks``."""
    alpha = 1 - confidence
    if design == "split":
        return 1 - alpha / looks
    if design == "spend" and looks > 1:  # half the error at the last look, half split over the earlier ones
        return 1 - alpha / 2 if look == looks else 1 - alpha / 2 / (looks - 1)
    return confidence


def simulate(design: str, true: float, sd: float, limit: float, *, repeats: int, repeats_max: int, paths: int,
             confidence: float, seed: int) -> tuple[float, float, float, float]:
    """(pass rate, fail rate, undecided rate, mean repeats) of one design over ``paths`` simulated runs."""
    rng = random.Random(seed)
    looks = repeats_max - repeats + 1
    first = repeats_max if design == "fixed" else repeats
    counts = {"pass": 0, "fail": 0, "open": 0}
    used = 0
    for _ in range(paths):
        ratios = [rng.gauss(true, sd) for _ in range(repeats_max)]
        outcome = "open"
        n = first
        for n in range(first, repeats_max + 1):
            outcome = _judge(ratios[:n], limit, look_level(design, confidence, n - repeats + 1, looks))
            if outcome != "open":
                break
        counts[outcome] += 1
        used += n
    return counts["pass"] / paths, counts["fail"] / paths, counts["open"] / paths, used / paths


def main(argv: Sequence[str] | None = None) -> int:
    p = OneLineParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--sd", type=positive, default=0.05, help="sd of the per-repeat paired change")
    p.add_argument("--limit", type=positive, default=0.10)
    p.add_argument("--repeats", type=count(1), default=3)
    p.add_argument("--repeats-max", type=count(1), default=10)
    p.add_argument("--paths", type=count(1), default=4000)
    p.add_argument("--confidence", type=fraction, default=0.95)
    a = p.parse_args(argv)
    if a.repeats_max < a.repeats:
        p.error(f"argument --repeats-max: must be >= --repeats ({a.repeats}), got {a.repeats_max}")
    print(f"sd {a.sd}, limit +{a.limit:.0%}, repeats {a.repeats}..{a.repeats_max}, confidence {a.confidence}, "
          f"{a.paths} simulated runs per cell")
    print("| design | true change | pass | fail | inconclusive | mean repeats |")
    print("|---|---|---|---|---|---|")
    for true in (a.limit, 0.0, 2 * a.limit, 2.5 * a.limit):
        for design in ("fixed", "naive", "split", "spend"):
            ps, fl, op, n = simulate(design, true, a.sd, a.limit, repeats=a.repeats, repeats_max=a.repeats_max,
                                     paths=a.paths, confidence=a.confidence,
                                     seed=1)
            print(f"| {design} | {true:+.0%} | {ps:.1%} | {fl:.1%} | {op:.1%} | {n:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
