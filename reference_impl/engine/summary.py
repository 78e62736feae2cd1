"""The simulator CLI's summary: bench_serving's (``workloads.bench_serving``) plus the modelled server's
retractions and peak pool usage. Every number is modelled (``"modelled": true``), not measured."""

from __future__ import annotations

from typing import Any

from reference_impl.engine.simulator import SimResult
from workloads import bench_serving
from workloads.stats import percentile

__all__ = ["percentile", "summarize"]


def summarize(result: SimResult) -> dict[str, Any]:
    out = bench_serving.summarize(result.records, modelled=True)
    out.update(
        {
            "retractions": result.retractions,
            "peak_token_usage": result.peak_kv_used / result.kv_pool_tokens,
            "peak_mamba_usage": result.peak_states_used / result.state_pool_slots,
        }
    )
    return out
