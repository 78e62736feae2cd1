"""compare's ``token_hit_rate`` row: the absolute change of cached / prompt tokens, under the TTFT row's repeats rule.

Hit rates are not deterministic where it matters: on a server under concurrency the order requests are scheduled
in changes what is cached when each arrives, so one run's rate drifts from the next as its TTFT does. A bootstrap
over one repeat's request pairs sees only request-to-request spread, never that drift: it passed two identical runs
and decided a drop on one repeat a side. So, as for TTFT, the row decides on a Welch t-interval over the runs'
per-repeat rates (two runs share no repeat to pair), each over the requests both runs completed; with fewer than two
repeats a side it is ``inconclusive``, the request-pair bootstrap shown as advisory. Repeats that agree exactly (a
replay, the simulator) give a zero-width interval: they decide, as they should.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence

from hybridbench.compare.deltas import CompareCfg, Delta, interval_row, skip_row, undecided_row
from hybridbench.metrics.stats import paired_bootstrap, welch_difference
from hybridbench.records.hits import impossible_hit_detail, impossible_hits
from hybridbench.records.schema import Record

__all__ = ["hit_rate_row"]


def _hit_rate(recs: Sequence[Record]) -> float:
    prompt = sum(r.prompt_tokens for r in recs)
    return sum(r.cached_tokens or 0 for r in recs) / prompt if prompt else math.nan


def _hit_rate_change(pairs: Sequence[tuple[Record, Record]]) -> float:
    return _hit_rate([c for _, c in pairs]) - _hit_rate([b for b, _ in pairs])


def _per_repeat(pairs: Sequence[tuple[Record, Record]]) -> tuple[list[float], list[float]]:
    """Each side's rate per repeat, over that repeat's requests both runs completed (like for like)."""
    by: dict[int, list[tuple[Record, Record]]] = defaultdict(list)
    for b, c in pairs:
        by[c.repeat].append((b, c))
    rates = [(_hit_rate([b for b, _ in ps]), _hit_rate([c for _, c in ps])) for _, ps in sorted(by.items())]
    kept = [(b, c) for b, c in rates if math.isfinite(b) and math.isfinite(c)]
    return [b for b, _ in kept], [c for _, c in kept]


def hit_rate_row(workload: str, arm: str, c_ok: Sequence[Record], pairs: Sequence[tuple[Record, Record]],
                 cfg: CompareCfg, *, seed: int) -> Delta:
    """The row over ``pairs`` (each request completed in both runs: baseline's, candidate's); ``c_ok``: every request
    the candidate completed."""
    subject = ("token_hit_rate", workload, arm)
    expected = f"token hit rate change >= -{cfg.max_hit_rate_drop:.2f}"
    # A hit longer than its prompt (or negative) is a build miscounting its hits (the run's cache_hits fails it): it
    # must not lift the candidate's rate past the baseline's.
    impossible = impossible_hits(c_ok)
    if impossible:
        return Delta(*subject, "fail", None, None, None, None, None, expected,
                     impossible_hit_detail(impossible, who="candidate"))
    # Builds that report no hit count at all have no rate: counted as 0 it "held" at 0 -> 0 and passed. Only when
    # neither side reports one: a candidate that stopped reporting (below) has a rate nobody knows, not no rate.
    if pairs and all(b.cached_tokens is None and c.cached_tokens is None for b, c in pairs):
        return skip_row(subject, expected, "the baseline and the candidate reported no cached-token count")
    # Some counts missing: read as 0, a baseline's missing hits made a candidate's real drop look like a gain.
    if partly := [f"{side} {n} of {len(pairs)}" for side, i in (("baseline", 0), ("candidate", 1))
                  if (n := sum(1 for p in pairs if p[i].cached_tokens is None))]:
        return undecided_row(subject, expected, f"requests with no cached-token count ({', '.join(partly)}): their "
                             "hits are unknown, not 0", limit=-cfg.max_hit_rate_drop)
    if not pairs:
        return skip_row(subject, expected, "no request completed in both runs")
    b_rep, c_rep = _per_repeat(pairs)
    if len(b_rep) >= 2 and len(c_rep) >= 2:
        ch = welch_difference(b_rep, c_rep, confidence=cfg.confidence)
        return interval_row(subject, statistics.fmean(b_rep), statistics.fmean(c_rep), ch,
                            limit=cfg.max_hit_rate_drop, expected=expected, higher_is_worse=False, relative=False,
                            confidence=cfg.confidence)
    # One repeat a side: the request pairs' interval is shown; what drifts between runs is unmeasured, so no verdict.
    ch = paired_bootstrap(pairs, _hit_rate_change, samples=cfg.bootstrap_samples, confidence=cfg.confidence,
                          seed=seed + 1)
    return undecided_row(subject, expected, f"{len(b_rep)} baseline and {len(c_rep)} candidate repeat(s): a verdict "
                         f"needs >= 2 a side; advisory {ch.estimate:+.3f} (request pairs, CI {ch.low:+.3f} .. "
                         f"{ch.high:+.3f})", limit=-cfg.max_hit_rate_drop, base=_hit_rate([b for b, _ in pairs]),
                         cand=_hit_rate([c for _, c in pairs]))
