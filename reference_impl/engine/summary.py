"""bench_serving-style summary of simulated records (research/sglang.md §6.4 key names).

Percentiles follow numpy's default (linear interpolation), which bench_serving uses; TPOT is
``(e2e - ttft) / (output_len - 1)`` for outputs longer than one token; ITL is per token.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from reference_impl.engine.simulator import SimResult
from workloads.stats import percentile

__all__ = ["percentile", "summarize"]


def _stats(prefix: str, values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {f"{k}_{prefix}_ms": math.nan for k in ("mean", "median", "std", "p90", "p95", "p99")}
    return {
        f"mean_{prefix}_ms": statistics.fmean(values),
        f"median_{prefix}_ms": percentile(values, 50),
        f"std_{prefix}_ms": statistics.pstdev(values),
        f"p90_{prefix}_ms": percentile(values, 90),
        f"p95_{prefix}_ms": percentile(values, 95),
        f"p99_{prefix}_ms": percentile(values, 99),
    }


def summarize(result: SimResult) -> dict[str, float | int | str]:
    ok = [r for r in result.records if r.status == "ok"]
    sent = [r.sent_s for r in result.records if r.sent_s is not None]
    ends = [r.end_s for r in result.records if r.end_s is not None]
    duration = (max(ends) - min(sent)) if sent and ends else 0.0
    inputs = sum(r.prompt_tokens for r in ok)
    outputs = sum(r.output_tokens for r in ok)
    cached = sum(r.cached_tokens for r in ok)
    ttft = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    e2e = [r.e2e_ms for r in ok if r.e2e_ms is not None]
    tpot = [
        (r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1)
        for r in ok
        if r.e2e_ms is not None and r.ttft_ms is not None and r.output_tokens > 1
    ]
    itl = [x for r in ok for x in r.itl_ms]
    out: dict[str, float | int | str] = {
        "modelled": "simulated by reference_impl (cost model, not a GPU measurement)",
        "completed": len(ok),
        "failed": len(result.records) - len(ok),
        "duration": duration,
        "total_input_tokens": inputs,
        "total_output_tokens": outputs,
        "request_throughput": len(ok) / duration if duration else math.nan,
        "input_throughput": inputs / duration if duration else math.nan,
        "output_throughput": outputs / duration if duration else math.nan,
        "total_throughput": (inputs + outputs) / duration if duration else math.nan,
        "concurrency": sum(e2e) / 1e3 / duration if duration else math.nan,
    }
    out.update(_stats("ttft", ttft))
    out.update(_stats("tpot", tpot))
    out.update(_stats("itl", itl))
    out.update(_stats("e2e_latency", e2e))
    out.update(
        {
            "total_cached_tokens": cached,
            "token_hit_rate": cached / inputs if inputs else 0.0,
            "request_hit_rate": sum(1 for r in ok if r.cached_tokens) / len(ok) if ok else 0.0,
            "retractions": result.retractions,
            "peak_token_usage": result.peak_kv_used / result.kv_pool_tokens,
            "peak_mamba_usage": result.peak_states_used / result.state_pool_slots,
        }
    )
    return out
