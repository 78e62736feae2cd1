"""compare's ``token_hit_rate`` row: the absolute change of cached / prompt tokens, under the TTFT row's repeats rule.

Hit rates are not deterministic where it matters: on a server under concurrency the order requests are scheduled
in changes what is cached when each arrives, so one run's rate drifts from the next as its TTFT does. A bootstrap
over one repeat's request pairs sees only request-to-request spread, never that drift: it passed two identical runs
and decided a drop on one repeat a side. So, as for TTFT, the row decides on a Welch t-interval over the runs'
per-repeat rates (two runs share no repeat to pair): every repeat of each run, each rate over the requests both runs
completed (like for like), so a candidate's repeats the baseline lacks count as its others do (built from request
pairs keyed by repeat, they never reached the interval). With fewer than two repeats a side it is ``inconclusive``,
the request-pair bootstrap shown as advisory. Repeats with equal rates give a zero-width interval, which decides only
where each run's repeats hit alike request by request (a replay of one trace does): equal totals from requests that
hit differently are a chance agreement, and the row is ``inconclusive``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from hybridbench.compare.deltas import CompareCfg, Delta, interval_row, skip_row, undecided_row
from hybridbench.metrics.stats import paired_bootstrap, welch_difference
from hybridbench.records.hits import (
    hit_rate_by_repeat,
    hits_alike_across_repeats,
    impossible_hit_detail,
    impossible_hits,
    token_hit_rate,
)
from hybridbench.records.schema import Record

__all__ = ["hit_rate_row"]


def _hit_rate_change(pairs: Sequence[tuple[Record, Record]]) -> float:
    return token_hit_rate([c for _, c in pairs]) - token_hit_rate([b for b, _ in pairs])


def hit_rate_row(pair: tuple[str, str], b_ok: Sequence[Record], c_ok: Sequence[Record],
                 pairs: Sequence[tuple[Record, Record]], cfg: CompareCfg, *, seed: int) -> Delta:
    """The row of ``pair`` (workload, arm) over every request each run completed (``b_ok``, ``c_ok``: all repeats)
    whose index both completed; ``pairs``: the requests completed in both runs' same repeat (one-repeat advisory)."""
    subject = ("token_hit_rate", *pair)
    expected = f"token hit rate change >= -{cfg.max_hit_rate_drop:.2f}"
    # A hit longer than its prompt (or negative) is a build miscounting its hits (the run's cache_hits fails it): it
    # must not lift the candidate's rate past the baseline's.
    impossible = impossible_hits(c_ok)
    if impossible:
        return Delta(*subject, "fail", None, None, None, None, None, expected,
                     impossible_hit_detail(impossible, who="candidate"))
    common = {r.request_index for r in b_ok} & {r.request_index for r in c_ok}
    b_recs, c_recs = ([r for r in ok if r.request_index in common] for ok in (b_ok, c_ok))
    # Builds that report no hit count at all have no rate: counted as 0 it "held" at 0 -> 0 and passed. Only when
    # neither side reports one: a candidate that stopped reporting (below) has a rate nobody knows, not no rate.
    if common and all(r.cached_tokens is None for r in (*b_recs, *c_recs)):
        return skip_row(subject, expected, "the baseline and the candidate reported no cached-token count")
    # Some counts missing: read as 0, a baseline's missing hits made a candidate's real drop look like a gain.
    if partly := [f"{side} {n} of {len(recs)}" for side, recs in (("baseline", b_recs), ("candidate", c_recs))
                  if (n := sum(1 for r in recs if r.cached_tokens is None))]:
        return undecided_row(subject, expected, f"requests with no cached-token count ({', '.join(partly)}): their "
                             "hits are unknown, not 0", limit=-cfg.max_hit_rate_drop)
    if not common:
        return skip_row(subject, expected, "no request completed in both runs")
    b_rep, c_rep = (list(hit_rate_by_repeat(recs).values()) for recs in (b_recs, c_recs))  # over common
    if len(b_rep) >= 2 and len(c_rep) >= 2:
        alike = hits_alike_across_repeats(b_recs) and hits_alike_across_repeats(c_recs)
        ch = welch_difference(b_rep, c_rep, confidence=cfg.confidence, exact=alike)
        if ch.se == 0 and not alike:
            return undecided_row(subject, expected, f"{ch.estimate:+.3f} with no spread between repeats, but their "
                                 "requests hit differently from one repeat to the next: the rates agreed by chance, "
                                 "and a spread of 0 is no interval", limit=-cfg.max_hit_rate_drop,
                                 base=statistics.fmean(b_rep), cand=statistics.fmean(c_rep))
        return interval_row(subject, statistics.fmean(b_rep), statistics.fmean(c_rep), ch,
                            limit=cfg.max_hit_rate_drop, expected=expected, higher_is_worse=False, relative=False,
                            confidence=cfg.confidence)
    # One repeat a side: the request pairs' interval is shown; what drifts between runs is unmeasured, so no verdict.
    ch = paired_bootstrap(pairs, _hit_rate_change, samples=cfg.bootstrap_samples, confidence=cfg.confidence,
                          seed=seed + 1)
    return undecided_row(subject, expected, f"{len(b_rep)} baseline and {len(c_rep)} candidate repeat(s): a verdict "
                         f"needs >= 2 a side; advisory {ch.estimate:+.3f} (request pairs, CI {ch.low:+.3f} .. "
                         f"{ch.high:+.3f})", limit=-cfg.max_hit_rate_drop, base=token_hit_rate(b_recs),
                         cand=token_hit_rate(c_recs))
