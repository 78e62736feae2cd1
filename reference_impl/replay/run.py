"""Sequential, Marconi-style trace replay: lookup then admit, request by request, in ``ts`` order."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from reference_impl.models import ModelSpec
from reference_impl.replay.api import ReplayCache
from workloads.trace import TraceRow

__all__ = ["ReplayResult", "replay_rows"]


@dataclass(frozen=True, slots=True)
class ReplayResult:
    policy: str
    num_requests: int
    input_tokens: int
    hit_tokens: int
    hit_requests: int
    flops_saved: float
    states_admitted: int
    states_evicted: int
    elapsed_s: float
    notes: dict[str, float]

    @property
    def token_hit_rate(self) -> float:
        return self.hit_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def request_hit_rate(self) -> float:
        return self.hit_requests / self.num_requests if self.num_requests else 0.0

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = asdict(self)
        out["token_hit_rate"] = self.token_hit_rate
        out["request_hit_rate"] = self.request_hit_rate
        return out


def replay_rows(policy: str, rows: Iterable[TraceRow], cache: ReplayCache, model: ModelSpec) -> ReplayResult:
    # Marconi's simulator replays in timestamp order; a stable sort keeps file order on ties.
    ordered = sorted(rows, key=lambda r: r.ts)
    start = time.perf_counter()
    input_tokens = hit_tokens = hit_requests = 0
    flops = 0.0
    for row in ordered:
        hit = cache.lookup(row.input_tokens)
        cache.admit(row.input_tokens, row.output_tokens)
        input_tokens += len(row.input_tokens)
        hit_tokens += hit
        if hit:
            hit_requests += 1
            flops += model.prefill_flops(hit)
    elapsed = time.perf_counter() - start
    stats = cache.stats()
    return ReplayResult(
        policy=policy,
        num_requests=len(ordered),
        input_tokens=input_tokens,
        hit_tokens=hit_tokens,
        hit_requests=hit_requests,
        flops_saved=flops,
        states_admitted=stats.states_admitted,
        states_evicted=stats.states_evicted,
        elapsed_s=elapsed,
        notes=dict(stats.notes),
    )
