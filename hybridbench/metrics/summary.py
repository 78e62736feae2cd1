"""Per-trial summary from records alone, with SGLang bench_serving's and `vllm bench serve`'s key names."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from hybridbench.metrics.stats import percentile
from hybridbench.records.schema import Record

__all__ = ["CLIENT_DELAY_FLAG_FRACTION", "SUMMARY_KEYS", "aggregate", "client_delay_flagged", "summarize"]

# A run is flagged when the client's p99 delay exceeds this fraction of the median TTFT: past that, the
# client's own lag is a visible part of the latencies it reports.
CLIENT_DELAY_FLAG_FRACTION = 0.1

# Keys that describe one run's clock: every repeat's timestamps start at zero, so pooling repeats would
# overlap them (three repeats would show three times the throughput). Across repeats they are means.
PER_RUN_KEYS = ("duration", "request_throughput", "input_throughput", "output_throughput", "total_throughput",
                "total_token_throughput", "concurrency")


def _dist(prefix: str, values: Sequence[float]) -> dict[str, float]:
    out = {f"{k}_{prefix}_ms": math.nan for k in ("mean", "median", "std", "p90", "p95", "p99")}
    if values:
        out.update(
            {
                f"mean_{prefix}_ms": statistics.fmean(values),
                f"median_{prefix}_ms": percentile(values, 50),
                f"std_{prefix}_ms": statistics.pstdev(values),
                f"p90_{prefix}_ms": percentile(values, 90),
                f"p95_{prefix}_ms": percentile(values, 95),
                f"p99_{prefix}_ms": percentile(values, 99),
            }
        )
    return out


def client_delay_flagged(summary: dict[str, Any]) -> bool:
    """The client-delay rule, on a summary's (or aggregate's) own keys; False when either is unknown."""
    delay, ttft = summary.get("p99_client_delay_ms"), summary.get("median_ttft_ms")
    if not isinstance(delay, (int, float)) or not isinstance(ttft, (int, float)):
        return False
    if math.isnan(delay) or math.isnan(ttft) or ttft <= 0:
        return False
    return bool(delay > CLIENT_DELAY_FLAG_FRACTION * ttft)


def summarize(records: Sequence[Record]) -> dict[str, Any]:
    ok = [r for r in records if r.status == "ok"]
    sent = [r.sent_s for r in records if r.sent_s is not None]
    ends = [r.end_s for r in records if r.end_s is not None]
    duration = max(ends) - min(sent) if sent and ends else 0.0
    inputs = sum(r.prompt_tokens for r in ok)
    outputs = sum(r.output_tokens for r in ok)
    cached = sum(r.cached_tokens or 0 for r in ok)
    ttft = [t for r in ok if (t := r.ttft_ms) is not None]
    e2e = [t for r in ok if (t := r.e2e_ms) is not None]
    tpot = [
        (e - t) / (r.output_tokens - 1)
        for r in ok
        if (e := r.e2e_ms) is not None and (t := r.ttft_ms) is not None and r.output_tokens > 1
    ]
    itl = [x for r in ok for x in r.itl_ms]
    delays = [d for r in records if (d := r.client_delay_ms) is not None]

    def rate(n: float) -> float:
        return n / duration if duration > 0 else math.nan

    out: dict[str, Any] = {
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "duration": duration,
        "total_input_tokens": inputs,
        "total_output_tokens": outputs,
        "request_throughput": rate(len(ok)),
        "input_throughput": rate(inputs),
        "output_throughput": rate(outputs),
        "total_throughput": rate(inputs + outputs),
        "total_token_throughput": rate(inputs + outputs),  # vllm bench serve's name
        "concurrency": sum(e2e) / 1e3 / duration if duration > 0 else math.nan,
        **_dist("ttft", ttft),
        **_dist("tpot", tpot),
        **_dist("itl", itl),
        **_dist("e2e_latency", e2e),
        **{k.replace("e2e_latency", "e2el"): v for k, v in _dist("e2e_latency", e2e).items()},  # vLLM names
        "total_cached_tokens": cached,
        "token_hit_rate": cached / inputs if inputs else 0.0,
        "request_hit_rate": sum(1 for r in ok if r.cached_tokens) / len(ok) if ok else 0.0,
        "p99_client_delay_ms": percentile(delays, 99),
        "modelled": any(r.modelled for r in records),
    }
    out["client_delay_flagged"] = client_delay_flagged(out)
    return out


SUMMARY_KEYS = tuple(summarize([]).keys())


def aggregate(records: Sequence[Record], trial_summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One arm on one workload across repeats: distributions and counts pool every request; the
    per-run keys are the mean of the repeats' own values."""
    out = summarize(records)
    for key in PER_RUN_KEYS:
        values = [v for s in trial_summaries if not math.isnan(v := float(s[key]))]
        out[key] = statistics.fmean(values) if values else math.nan
    out["repeats"] = len(trial_summaries)
    # Pooling can dilute one repeat whose client fell behind; that repeat's numbers are still suspect.
    flagged = sum(1 for s in trial_summaries if s.get("client_delay_flagged"))
    out["client_delay_flagged_repeats"] = flagged
    out["client_delay_flagged"] = bool(out["client_delay_flagged"] or flagged)
    return out
