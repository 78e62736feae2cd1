"""One bench_serving summary for the harness and the simulator CLI: the same keys, the same values."""

from __future__ import annotations

import math

import pytest

from hybridbench.metrics.summary import summarize as harness_summarize
from hybridbench.records.schema import Record
from reference_impl.engine.simulator import RequestRecord
from workloads import bench_serving


def _pair(i: int, *, ok: bool = True) -> tuple[Record, RequestRecord]:
    sent, first, end = 0.1 * i, 0.1 * i + 0.02 * (i + 1), 0.1 * i + 0.3
    rec = Record("run", "t", "lru", "w", 0, i, i, 0, 0.1 * i, sent, first, end, 100 + i, 4, 10 * i,
                 "ok" if ok else "error", itl_ms=[5.0, 6.0, 7.0], modelled=True)
    sim = RequestRecord(i, i, 0, 0.1 * i, sent, first, end, 100 + i, 4, 10 * i, status="ok" if ok else "error",
                        itl_ms=[5.0, 6.0, 7.0])
    return rec, sim


def test_harness_and_simulator_records_summarize_identically() -> None:
    pairs = [_pair(i, ok=i != 3) for i in range(6)]
    harness = harness_summarize([r for r, _ in pairs])
    sim = bench_serving.summarize([s for _, s in pairs], modelled=True)
    for key, value in sim.items():
        assert harness[key] == pytest.approx(value, nan_ok=True), key
    assert sim["modelled"] is True and harness["modelled"] is True
    assert sim["completed"] == 5 and sim["failed"] == 1
    assert sim["mean_e2el_ms"] == sim["mean_e2e_latency_ms"]  # vllm bench serve's name for the same value
    assert sim["total_token_throughput"] == sim["total_throughput"]
    # TTFT of request i is 20 ms * (i + 1); request 3 failed and is left out.
    assert sim["mean_ttft_ms"] == pytest.approx(sum(20.0 * (i + 1) for i in (0, 1, 2, 4, 5)) / 5)


def test_no_records_gives_nan_distributions_and_zero_rates() -> None:
    s = bench_serving.summarize([], modelled=False)
    assert s["completed"] == 0 and s["token_hit_rate"] == 0.0
    assert math.isnan(s["p99_ttft_ms"]) and math.isnan(s["request_throughput"])
