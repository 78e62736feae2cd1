"""SGLang bench_serving's summary of served requests, under its key names and `vllm bench serve`'s: the one
definition the harness (``hybridbench.metrics``) and the simulator CLI (``reference_impl.simulate``) share.

Percentiles follow numpy's default (linear interpolation), as bench_serving's do; TPOT is
``(e2e - ttft) / (output_tokens - 1)`` for outputs longer than one token; ITL is per token. A request's
own timing (``ServedTiming``) is defined here once too, for both record types.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any, Protocol

from workloads.stats import percentiles

__all__ = ["DISTRIBUTIONS", "ServedRequest", "ServedTiming", "distribution", "summarize"]

DISTRIBUTIONS = ("mean", "median", "std", "p90", "p95", "p99")


class ServedTiming:
    """TTFT and end-to-end latency of one request, from its send, first-token and end times (seconds)."""

    __slots__ = ()
    sent_s: float | None
    first_token_s: float | None
    end_s: float | None

    @property
    def ttft_ms(self) -> float | None:
        if self.first_token_s is None or self.sent_s is None:
            return None
        return (self.first_token_s - self.sent_s) * 1e3

    @property
    def e2e_ms(self) -> float | None:
        if self.end_s is None or self.sent_s is None:
            return None
        return (self.end_s - self.sent_s) * 1e3


class ServedRequest(Protocol):
    """What the summary reads of a request: a harness record or a simulator record."""

    @property
    def status(self) -> str: ...
    @property
    def sent_s(self) -> float | None: ...
    @property
    def end_s(self) -> float | None: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cached_tokens(self) -> int | None: ...
    @property
    def itl_ms(self) -> list[float]: ...
    @property
    def ttft_ms(self) -> float | None: ...
    @property
    def e2e_ms(self) -> float | None: ...


def distribution(prefix: str, values: Sequence[float]) -> dict[str, float]:
    """``{mean,median,std,p90,p95,p99}_{prefix}_ms``; NaN for no values."""
    if not values:
        return {f"{k}_{prefix}_ms": math.nan for k in DISTRIBUTIONS}
    median, p90, p95, p99 = percentiles(values, (50, 90, 95, 99))
    return {
        f"mean_{prefix}_ms": statistics.fmean(values),
        f"median_{prefix}_ms": median,
        f"std_{prefix}_ms": statistics.pstdev(values),
        f"p90_{prefix}_ms": p90,
        f"p95_{prefix}_ms": p95,
        f"p99_{prefix}_ms": p99,
    }


def summarize(records: Sequence[ServedRequest], *, modelled: bool) -> dict[str, Any]:
    """The summary of one run of requests; ``modelled``: times come from a cost model, not a measurement."""
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

    def rate(n: float) -> float:
        return n / duration if duration > 0 else math.nan

    e2e_dist = distribution("e2e_latency", e2e)
    return {
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
        **distribution("ttft", ttft),
        **distribution("tpot", tpot),
        **distribution("itl", itl),
        **e2e_dist,
        **{k.replace("e2e_latency", "e2el"): v for k, v in e2e_dist.items()},  # vllm bench serve's names
        "total_cached_tokens": cached,
        "token_hit_rate": cached / inputs if inputs else 0.0,
        "request_hit_rate": sum(1 for r in ok if r.cached_tokens) / len(ok) if ok else 0.0,
        "modelled": modelled,
    }
