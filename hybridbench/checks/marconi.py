"""marconi_trends: Marconi's published direction, on this run's cache hits.

Marconi (arXiv 2411.19379) reports a higher token hit rate than both of its baselines at every capacity of
its sweeps: 4.5x-34.4x vLLM+'s on average (Fig. 7) and a positive win over SGLang+ (P95 +19% to +220%,
Fig. 8; Marconi, arXiv 2411.19379). The check asks only for that direction — the ``marconi`` arm's token
hit rate above each baseline arm's (``sglang_plus``, ``vllm_plus``) on every workload — never for the size,
which depends on the trace. A comparison in which neither cache evicted a state did not exercise the
eviction policy, and one with equal hit rates (a capacity where no eviction choice cost a hit) compared
nothing: both ``inconclusive``, never a pass; so is a rate over requests some of which carry no hit count or an
impossible one (negative, or longer than the prompt).
"""

from __future__ import annotations

from collections.abc import Sequence

from hybridbench.checks.base import CheckInput, CheckResult, Status
from hybridbench.checks.evictions import counter
from hybridbench.checks.subjects import marconi_arms, marconi_baselines
from hybridbench.records.hits import impossible_hit_detail, impossible_hits, unknown_hits
from hybridbench.records.schema import Record

__all__ = ["marconi_trends"]


def _hit_rate(recs: Sequence[Record]) -> float:
    ok = [r for r in recs if r.status == "ok"]
    prompt = sum(r.prompt_tokens for r in ok)
    return sum(r.cached_tokens or 0 for r in ok) / prompt if prompt else float("nan")


def _evicted(inp: CheckInput, workload: str, arm: str) -> bool:
    snaps = inp.snapshots.get((workload, arm), [])
    return bool(snaps) and all((counter(s, "evicted_states") or 0) + (counter(s, "evicted_tokens") or 0) > 0
                               for s in snaps)


def marconi_trends(inp: CheckInput) -> Sequence[CheckResult]:
    out = []
    marconi = marconi_arms(inp.arms)
    for workload in inp.workloads:
        for arm in marconi:
            ours = _hit_rate(inp.records.get((workload, arm), []))
            for base in marconi_baselines(inp.arms):
                theirs = _hit_rate(inp.records.get((workload, base), []))
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
                elif not (_evicted(inp, workload, arm) or _evicted(inp, workload, base)):
                    status = "inconclusive"
                    detail = f"{ours:.1%} vs {theirs:.1%}, but neither cache evicted: the policies never differed"
                elif ours == theirs:  # a cache roomy enough that no choice cost a hit: nothing was compared
                    status = "inconclusive"
                    detail = (f"{arm} and {base} both {ours:.1%}: at this capacity the policies made no "
                              "difference")
                else:
                    status = "pass" if ours > theirs else "fail"
                    ratio = ours / theirs if theirs else float("inf")
                    detail = f"{arm} {ours:.1%} vs {base} {theirs:.1%} ({ratio:.2f}x)"
                out.append(CheckResult("marconi_trends", workload, f"{arm} vs {base}", status, ours - theirs,
                                       expected, detail))
    return out
