"""``cache_hits``' cross-check of the two hit counts a server gives: per-request usage against its own log.

For an engine whose ``#cached-token`` log lines count exactly what its responses report (TokenSpeed: both are a
request's ``extend_prefix_lens`` in its first forward; docs/engines/tokenspeed.md), the trial's log total must equal
the sum of the recorded ``cached_tokens``. The engine says so in its trial snapshot (``LOG_COUNTS_USAGE_HITS``);
a difference means records lost or misread hits, or the log parser missed lines, so it fails loudly rather
than letting the usage numbers stand alone. A trial with failed requests cannot be compared (a request the
server prefilled but did not answer is in the log, not in the records): inconclusive, with the numbers; so is one
whose log yielded no prefill line or whose usage lacks a request's count (both "0" would agree about nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hybridbench.checks.base import CheckResult, Status
from hybridbench.records.coverage import TrialOutcome
from hybridbench.records.hits import impossible_hits, unknown_hits
from hybridbench.records.schema import LOG_COUNTS_USAGE_HITS, Record

__all__ = ["usage_vs_log"]

EXPECTED = "sum of usage cached_tokens == the server log's #cached-token total, per trial"


def usage_vs_log(workload: str, arm: str, outcomes: Sequence[TrialOutcome], snapshots: Sequence[dict[str, Any]],
                 records: Sequence[Record]) -> CheckResult | None:
    """One row for (workload, arm), or None when no trial's engine promises the two counts agree."""
    ran = [o for o in outcomes if o.state != "not run"]  # snapshots are kept for these, in this order
    compared: list[str] = []
    wrong: list[str] = []
    unsure: list[str] = []
    for outcome, snap in zip(ran, snapshots, strict=False):
        if not snap.get(LOG_COUNTS_USAGE_HITS):
            continue
        recs = [r for r in records if r.trial_id == outcome.trial_id]
        usage = sum(r.cached_tokens or 0 for r in recs)
        log = snap.get("log_cached_tokens")
        label = f"r{outcome.repeat}: usage {usage}, log {log}"
        unread = unknown_hits(recs)
        if not isinstance(log, int) or isinstance(log, bool):
            unsure.append(f"r{outcome.repeat}: no server log total")
        elif recs and snap.get("log_prefill_batches") == 0:  # requests sent, no prefill line parsed: not a total of 0
            unsure.append(f"r{outcome.repeat}: no prefill line of the server log parsed")
        elif unread:  # a missing count is not 0 hits: 0 == 0 would agree about nothing
            unsure.append(f"r{outcome.repeat}: {unread} completed request(s) with no usage cached_tokens")
        elif bad := impossible_hits(recs):  # -30 and +30 sum to a log's 0: agreement about nothing
            unsure.append(f"r{outcome.repeat}: {len(bad)} request(s) with an impossible usage cached_tokens")
        elif usage == log:
            compared.append(label)
        elif any(r.status != "ok" for r in recs) or outcome.state != "ran":
            unsure.append(f"{label} (the trial has failed requests)")
        else:
            wrong.append(label)
    if not (compared or wrong or unsure):
        return None
    status: Status = "fail" if wrong else "inconclusive" if unsure else "pass"
    shown = wrong or unsure or compared
    detail = f"{len(wrong)} of {len(compared) + len(wrong) + len(unsure)} trial(s) differ: " if wrong else ""
    return CheckResult("cache_hits", f"{workload}/log", arm, status, float(len(wrong)), EXPECTED,
                       detail + "; ".join(shown[:3]))
