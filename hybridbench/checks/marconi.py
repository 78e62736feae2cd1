"""marconi_trends: Marconi's published direction, on this run's cache hits.

Marconi (arXiv 2411.19379) reports a higher token hit rate than both of its baselines at every capacity of
its sweeps: 4.5x-34.4x vLLM+'s on average (Fig. 7) and a positive win over SGLang+ (P95 +19% to +220%,
Fig. 8; Marconi, arXiv 2411.19379). The check asks only for that direction — the ``marconi`` arm's token
hit rate above each baseline arm's (``sglang_plus``, ``vllm_plus``) on every workload — never for the size,
which depends on the trace. A comparison in which neither cache evicted a state did not exercise the
eviction policy: ``inconclusive``, never a pass; so is a rate over requests some of which carry no hit count or an
impossible one (negative, or longer than the prompt).

How large a lead must be depends on where the hits came from. A replay of a trace (the ``replay`` engine under a
trace load, which says so in its trial snapshots: ``DETERMINISTIC_HITS``) is deterministic: the same trace through the
same policy hits the same tokens in every repeat, so one repeat's lead is the policies' own; but a lead under the
rates' printed precision (``ROUNDING``, 0.1 percentage point: "40.0% vs 40.0%") compared nothing, as a tie does, and is
``inconclusive``. Modelled records alone are no such replay: the simulator's follow each repeat's arrival seed. Any
other run must clear the spread between its repeats: a paired t-interval over the per-repeat leads (arms alternate
within a repeat) passes only when wholly above ``ROUNDING``, fails only when wholly below ``-ROUNDING``; with one
repeat the spread is unmeasured and the row is ``inconclusive`` whatever the lead. Leads equal in every repeat give a
zero-width interval, which decides only where both arms' repeats hit alike request by request: equal leads from
requests that hit differently agreed by chance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hybridbench.checks.base import CheckInput, CheckResult, Status
from hybridbench.checks.evictions import counter
from hybridbench.checks.subjects import marconi_arms, marconi_baselines
from hybridbench.metrics.stats import paired_difference
from hybridbench.records.hits import (
    hit_rate_by_repeat,
    hits_alike_across_repeats,
    impossible_hit_detail,
    impossible_hits,
    token_hit_rate,
    unknown_hits,
)
from hybridbench.records.schema import DETERMINISTIC_HITS, Record

__all__ = ["ROUNDING", "marconi_trends"]

# The smallest lead the rows can show (rates print to 0.1 percentage point): one below it is a tie.
ROUNDING = 0.001


def _evicted(inp: CheckInput, workload: str, arm: str) -> bool:
    snaps = inp.snapshots.get((workload, arm), [])
    return bool(snaps) and all((counter(s, "evicted_states") or 0) + (counter(s, "evicted_tokens") or 0) > 0
                               for s in snaps)


def _pt(v: float) -> str:
    return f"{v * 100:+.2f} pt"


def _replayed(inp: CheckInput, workload: str, arms: Sequence[str]) -> bool:
    """Every trial of both arms a deterministic replay, by the engine's own word (a snapshot per trial that ran)."""
    snaps = [s for a in arms for s in inp.snapshots.get((workload, a), [])]
    return bool(snaps) and all(s.get(DETERMINISTIC_HITS) is True for s in snaps)


def _lead(inp: CheckInput, ours: Sequence[Record], theirs: Sequence[Record], *, replayed: bool) -> tuple[Status, str]:
    """The lead judged against rounding (a deterministic replay) or against the spread between repeats."""
    a, b = hit_rate_by_repeat(ours), hit_rate_by_repeat(theirs)
    paired = sorted(set(a) & set(b))
    if len(paired) < 2 and not replayed:
        return "inconclusive", (f"{len(paired)} paired repeat(s) and no deterministic replay: a verdict needs >= 2 "
                                "(scheduling or the arrival seed changes what is cached, and the spread between "
                                "repeats is unmeasured)")
    if len(paired) < 2:  # one replay: the lead itself, exactly
        lead = token_hit_rate(ours) - token_hit_rate(theirs)
        low = high = lead
        how = f"lead {_pt(lead)}, a deterministic replay"
    else:
        alike = replayed or (hits_alike_across_repeats(ours) and hits_alike_across_repeats(theirs))
        ch = paired_difference([b[r] for r in paired], [a[r] for r in paired], confidence=inp.cfg.confidence,
                               exact=alike)
        low, high = ch.low, ch.high
        how = f"lead {_pt(ch.estimate)} (CI {_pt(low)} .. {_pt(high)}, {len(paired)} paired repeats)"
        if ch.se == 0 and not alike:
            return "inconclusive", (f"lead {_pt(ch.estimate)} in each of {len(paired)} paired repeats, but the "
                                    "requests hit differently from one repeat to the next: the leads agreed by chance, "
                                    "and a spread of 0 is no interval")
    if low >= ROUNDING:
        return "pass", f"{how} >= +{ROUNDING * 100:.1f} pt"
    if high <= -ROUNDING:
        return "fail", f"{how} <= -{ROUNDING * 100:.1f} pt"
    if low == high:  # no spread: a lead within rounding is a tie
        return "inconclusive", (f"{how}, within the rates' rounding ({ROUNDING * 100:.1f} pt): at this capacity the "
                                "policies made no difference the rates can show")
    return "inconclusive", (f"{how}: the interval reaches within {ROUNDING * 100:.1f} pt of a tie, so the lead is not "
                            "clear of the spread between repeats")


def marconi_trends(inp: CheckInput) -> Sequence[CheckResult]:
    """The marconi arm's token hit rate above each of Marconi's baselines'. On a deterministic replay (the replay
    engine under a trace load) the lead must reach 0.1 percentage point, the rates' printed precision: a smaller one
    is a tie (inconclusive). Otherwise a paired t-interval over the per-repeat leads must clear +0.1 pt (wholly below
    -0.1 pt fails); one repeat has no spread to clear, so it is inconclusive whatever the lead."""
    out = []
    marconi = marconi_arms(inp.arms)
    for workload in inp.workloads:
        for arm in marconi:
            our_recs = inp.records.get((workload, arm), [])
            ours = token_hit_rate(our_recs)
            for base in marconi_baselines(inp.arms):
                their_recs = inp.records.get((workload, base), [])
                theirs = token_hit_rate(their_recs)
                expected = f"token hit rate above {base}'s (Marconi, Fig. 7/8)"
                status: Status
                unknown = sum(unknown_hits(inp.records.get((workload, a), [])) for a in (arm, base))
                impossible = [r for a in (arm, base) for r in impossible_hits(
                    r for r in inp.records.get((workload, a), []) if r.status == "ok")]
                if unknown:  # read as 0, a baseline's missing counts would lift the marconi arm above it
                    status = "inconclusive"
                    detail = f"{unknown} completed request(s) with no cached-token count: their hits are unknown"
                elif impossible:  # a negative count lowered a rate: the rates are unknown (cache_hits fails them)
                    status = "inconclusive"
                    detail = f"{impossible_hit_detail(impossible)}: the hit rates are unknown"
                elif idle := [a for a, rate in ((arm, ours), (base, theirs)) if not math.isfinite(rate)]:
                    status = "inconclusive"
                    recorded = sum(len(inp.records.get((workload, a), [])) for a in idle)
                    detail = (f"{' and '.join(idle)} completed no request (of {recorded} recorded): no hit rate to "
                              "compare")
                elif not (_evicted(inp, workload, arm) or _evicted(inp, workload, base)):
                    status = "inconclusive"
                    detail = f"{ours:.1%} vs {theirs:.1%}, but neither cache evicted: the policies never differed"
                else:
                    status, how = _lead(inp, our_recs, their_recs, replayed=_replayed(inp, workload, (arm, base)))
                    ratio = ours / theirs if theirs else float("inf")
                    detail = f"{arm} {ours:.1%} vs {base} {theirs:.1%} ({ratio:.2f}x): {how}"
                lead = ours - theirs
                out.append(CheckResult("marconi_trends", workload, f"{arm} vs {base}", status,
                                       lead if math.isfinite(lead) else None, expected, detail))
    return out
