"""Per-trial summary from records alone, with SGLang bench_serving's and `vllm bench serve`'s key names
(defined once, in ``workloads.bench_serving``), and the aggregate of an arm across repeats."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from hybridbench.metrics.stats import percentile
from hybridbench.records.schema import Record
from workloads import bench_serving

__all__ = ["CLIENT_DELAY_FLAG_FRACTION", "SUMMARY_KEYS", "aggregate", "client_delay_flagged", "modelled_summary",
           "summarize"]

# A run is flagged when the client's p99 delay exceeds this fraction of the median TTFT: past that, the
# client's own lag is a visible part of the latencies it reports.
CLIENT_DELAY_FLAG_FRACTION = 0.1

# Keys that describe one run's clock: every repeat's timestamps start at zero, so pooling repeats would
# overlap them (three repeats would show three times the throughput). Across repeats they are means.
PER_RUN_KEYS = ("duration", "request_throughput", "input_throughput", "output_throughput", "total_throughput",
                "total_token_throughput", "concurrency", "modelled_duration", "modelled_request_throughput",
                "modelled_input_throughput")


def client_delay_flagged(summary: dict[str, Any]) -> bool:
    """The client-delay rule, on a summary's (or aggregate's) own keys; False when either is unknown."""
    delay, ttft = summary.get("p99_client_delay_ms"), summary.get("median_ttft_ms")
    if not isinstance(delay, (int, float)) or not isinstance(ttft, (int, float)):
        return False
    if math.isnan(delay) or math.isnan(ttft) or ttft <= 0:
        return False
    return bool(delay > CLIENT_DELAY_FLAG_FRACTION * ttft)


def summarize(records: Sequence[Record]) -> dict[str, Any]:
    """bench_serving's summary (``workloads.bench_serving``) plus how far the client fell behind its schedule."""
    out = bench_serving.summarize(records, modelled=any(r.modelled for r in records))
    delays = [d for r in records if (d := r.client_delay_ms) is not None]
    out["p99_client_delay_ms"] = percentile(delays, 99)
    out["client_delay_flagged"] = client_delay_flagged(out)
    out.update(modelled_summary(records))
    return out


def modelled_summary(records: Sequence[Record]) -> dict[str, float]:
    """The reference server's modelled clock (``Record.modelled_*``): mean TTFT, and throughput over the span from
    the first request received to the last finished. NaN unless every completed request carries its stamps, in order
    (a server that does not report them, a trial with a request it never answered, or stamps nobody could measure)."""
    ok = [r for r in records if r.status == "ok"]
    # In order only (received <= first token <= end): a first token stamped before its receipt gave a negative TTFT,
    # and the ttft check passed at -980% (the wall clock's rule, records.timed, for the modelled clock).
    stamps = [(a, f, e) for r in ok if (a := r.modelled_received_s) is not None
              and (f := r.modelled_first_token_s) is not None and (e := r.modelled_end_s) is not None
              and a <= f <= e]
    if not stamps or len(stamps) < len(ok):
        return {"modelled_duration": math.nan, "modelled_mean_ttft_ms": math.nan,
                "modelled_request_throughput": math.nan, "modelled_input_throughput": math.nan}
    duration = max(e for _, _, e in stamps) - min(a for a, _, _ in stamps)
    return {
        "modelled_duration": duration,
        "modelled_mean_ttft_ms": statistics.fmean((f - a) * 1e3 for a, f, _ in stamps),
        "modelled_request_throughput": len(ok) / duration if duration > 0 else math.nan,
        "modelled_input_throughput": sum(r.prompt_tokens for r in ok) / duration if duration > 0 else math.nan,
    }


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
