"""evictions: did the compared arms evict? An eviction-policy comparison where nothing was evicted never
exercised the policy, so its verdict is ``inconclusive`` — never a pass.

Reads the trial snapshots' ``evicted_tokens`` / ``evicted_states`` (the server's or the simulator's own
counters, per trial). Every cache-on arm must have evicted something in every repeat; a counter the engine
does not expose, or one that went backwards, is unknown, and unknown is inconclusive too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hybridbench.checks.base import CheckInput, CheckResult, Status
from hybridbench.checks.subjects import host_tier_arms

__all__ = ["READS", "counter", "counter_warnings", "evictions", "host_hits"]

# The trial counters each check reads (an engine's EngineTraits.counters names those it has) and where a server
# keeps them (hybridbench.engines.evictions).
READS: dict[str, tuple[str, ...]] = {"evictions": ("evicted_tokens", "evicted_states"),
                                     "host_hits": ("host_loaded_tokens",)}
_SOURCE = {"evicted_tokens": "sglang:evicted_tokens_total",
           "evicted_states": "the reference server's evicted_mamba_states",
           "host_loaded_tokens": "sglang:load_back_tokens_total or the reference server's host_load_back_tokens"}


def counter_warnings(enabled: Sequence[str], engine: str, counters: frozenset[str], host_tier: bool) -> list[str]:
    """The enabled checks that read none of the counters ``engine`` has: inconclusive by design there, said before
    the run (host_hits only where an arm has a host tier: elsewhere it judges nothing)."""
    out = []
    for check in enabled:
        reads = READS.get(check, ())
        if reads and not counters & set(reads) and (check != "host_hits" or host_tier):
            out.append(f"{check}: engine {engine} reports none of the counters it reads "
                       f"({'; '.join(_SOURCE[r] for r in reads)}): it will be inconclusive")
    return out


def counter(snap: Mapping[str, Any], key: str) -> float | None:
    """A trial's count of ``key``; None when unknown: absent, not a number, or negative (a counter that went
    backwards in a snapshot saved before they were refused: truthy, it read as evidence)."""
    value = snap.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
        return None
    return float(value)


def _total(values: Sequence[float | None], unit: str) -> str:
    """A counter's sum over the repeats; ``unknown`` where the engine does not report it (never 0)."""
    known = [v for v in values if v is not None]
    if not known:
        return f"unknown {unit}"
    missing = len(values) - len(known)
    return f"{sum(known):.0f} {unit}" + (f" (unknown in {missing} of {len(values)} repeat(s))" if missing else "")


def evictions(inp: CheckInput) -> Sequence[CheckResult]:
    expected = "every compared arm evicts KV tokens or states in every repeat"
    out = []
    for workload in inp.workloads:
        for arm in inp.arms:
            if arm in inp.cache_off:
                continue
            snaps = inp.snapshots.get((workload, arm), [])
            per_repeat = [(counter(s, "evicted_tokens"), counter(s, "evicted_states")) for s in snaps]
            known = [(t, s) for t, s in per_repeat if t is not None or s is not None]
            tokens = sum(t or 0.0 for t, _ in known)
            states = sum(s or 0.0 for _, s in known)
            counted = (f"{_total([t for t, _ in per_repeat], 'KV tokens')}, "
                       f"{_total([s for _, s in per_repeat], 'states')}")
            # A repeat is evidence only if a counter it reports is above 0: an unknown counter never counts, and
            # a repeat whose only known counter is 0 may have evicted what the engine does not count.
            quiet = sum(1 for t, s in known if not (t or s))
            status: Status
            if not snaps:
                status, detail = "inconclusive", "no trial ran"
            elif len(known) < len(snaps):
                status, detail = "inconclusive", (f"{len(snaps) - len(known)} of {len(snaps)} trial(s) without "
                                                  f"eviction counters ({counted}): the policy may never have run")
            elif quiet:
                status, detail = "inconclusive", (f"nothing evicted in {quiet} of {len(snaps)} repeat(s) "
                                                  f"({counted} in all): the eviction policy was never exercised")
            else:
                status = "pass"
                detail = f"{counted} evicted over {len(snaps)} repeat(s)"
            observed = tokens + states if known else None  # unknown is not 0
            out.append(CheckResult("evictions", workload, arm, status, observed, expected, detail))
    return out


def host_hits(inp: CheckInput) -> Sequence[CheckResult]:
    """The host (L2) tier's purpose: prefixes evicted from the device still hit, loaded back from the host.
    Every arm with an ``l2`` tier must load KV back from the host in every repeat. Without device evictions
    there is nothing for the host to rescue (inconclusive); evictions but no load-back is a failure."""
    expected = "hits loaded back from the host tier after device eviction, in every repeat"
    out = []
    for workload in inp.workloads:
        for arm in host_tier_arms(inp.arms):
            snaps = inp.snapshots.get((workload, arm), [])
            loaded = [counter(s, "host_loaded_tokens") for s in snaps]
            evicted = [(counter(s, "evicted_tokens") or 0.0) + (counter(s, "evicted_states") or 0.0) for s in snaps]
            status: Status
            if not snaps or any(v is None for v in loaded):
                status, detail = "inconclusive", "no host load-back counter for every trial"
            elif not all(evicted):
                status = "inconclusive"
                # a repeat that evicted nothing it counted, with a counter it lacks (SGLang counts no states)
                unknown = sum(not e and None in (counter(s, "evicted_tokens"), counter(s, "evicted_states"))
                              for s, e in zip(snaps, evicted, strict=True))
                detail = (f"no device eviction count for {unknown} of {len(snaps)} repeat(s): whether the host tier "
                          "had anything to rescue is unknown" if unknown else
                          "the device evicted nothing in some repeat: nothing for the host tier to rescue")
            elif not all(loaded):
                status, detail = "fail", (f"the device evicted in every repeat, but {loaded.count(0.0)} of "
                                          f"{len(snaps)} repeat(s) loaded nothing back from the host")
            else:
                status = "pass"
                total = sum(v or 0.0 for v in loaded)
                detail = f"{total:.0f} KV tokens loaded back from the host over {len(snaps)} repeat(s)"
            out.append(CheckResult("host_hits", workload, arm, status, sum(v or 0.0 for v in loaded), expected, detail))
    return out
