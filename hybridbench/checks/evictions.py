"""evictions: did the compared arms evict? An eviction-policy comparison where nothing was evicted never
exercised the policy, so its verdict is ``inconclusive`` — never a pass.

Reads the trial snapshots' ``evicted_tokens`` / ``evicted_states`` (the server's or the simulator's own
counters, per trial). Every cache-on arm must have evicted something in every repeat; a counter the engine
does not expose is unknown, and unknown is inconclusive too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hybridbench.checks.base import CheckInput, CheckResult, Status

__all__ = ["evictions"]


def _count(snap: dict[str, Any], key: str) -> float | None:
    value = snap.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def evictions(inp: CheckInput) -> Sequence[CheckResult]:
    expected = "every compared arm evicts KV tokens or states in every repeat"
    out = []
    for workload in inp.workloads:
        for arm in inp.arms:
            if arm in inp.cache_off:
                continue
            snaps = inp.snapshots.get((workload, arm), [])
            per_repeat = [(_count(s, "evicted_tokens"), _count(s, "evicted_states")) for s in snaps]
            known = [(t, s) for t, s in per_repeat if t is not None or s is not None]
            tokens = sum(t or 0.0 for t, _ in known)
            states = sum(s or 0.0 for _, s in known)
            quiet = sum(1 for t, s in known if not (t or s))
            status: Status
            if not snaps:
                status, detail = "inconclusive", "no trial ran"
            elif len(known) < len(snaps):
                status, detail = "inconclusive", (f"{len(snaps) - len(known)} of {len(snaps)} trial(s) without "
                                                  "eviction counters: the policy may never have run")
            elif quiet:
                status, detail = "inconclusive", (f"nothing evicted in {quiet} of {len(snaps)} repeat(s) "
                                                  f"({tokens:.0f} KV tokens, {states:.0f} states in all): the "
                                                  "eviction policy was never exercised")
            else:
                status = "pass"
                detail = f"{tokens:.0f} KV tokens, {states:.0f} states evicted over {len(snaps)} repeat(s)"
            out.append(CheckResult("evictions", workload, arm, status, tokens + states, expected, detail))
    return out
