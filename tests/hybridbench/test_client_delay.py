"""The client-delay flag: one rule in metrics, carried in the summaries, read (not recomputed) by the report."""

from __future__ import annotations

from typing import Any

from hybridbench.metrics.summary import aggregate, client_delay_flagged, summarize
from hybridbench.records.schema import Record
from hybridbench.report.markdown import render_report


def record(i: int, delay_s: float, ttft_s: float = 0.1) -> Record:
    sent = i + delay_s
    return Record(run_id="r", trial_id="t", arm="a", workload="w", repeat=0, request_index=i, session_id=i,
                  turn_id=0, scheduled_s=float(i), sent_s=sent, first_token_s=sent + ttft_s, end_s=sent + ttft_s,
                  prompt_tokens=4, output_tokens=1, cached_tokens=0, status="ok")


def test_rule_is_p99_client_delay_above_a_tenth_of_median_ttft() -> None:
    assert client_delay_flagged({"p99_client_delay_ms": 11.0, "median_ttft_ms": 100.0})
    assert not client_delay_flagged({"p99_client_delay_ms": 9.0, "median_ttft_ms": 100.0})
    assert not client_delay_flagged({"p99_client_delay_ms": float("nan"), "median_ttft_ms": 100.0})
    assert not client_delay_flagged({})
    assert summarize([record(i, 0.05) for i in range(5)])["client_delay_flagged"] is True
    assert summarize([record(i, 0.001) for i in range(5)])["client_delay_flagged"] is False
    assert summarize([])["client_delay_flagged"] is False


def test_aggregate_keeps_a_flagged_repeat_that_pooling_would_dilute() -> None:
    clean = [record(i, 0.001) for i in range(200)]
    one_bad = [record(i, 0.05) for i in range(1)]  # 1 of 201 requests: under the pooled p99
    summaries = [summarize(clean), summarize(one_bad)]
    assert not client_delay_flagged(summarize([*clean, *one_bad]))
    agg = aggregate([*clean, *one_bad], summaries)
    assert agg["client_delay_flagged"] is True and agg["client_delay_flagged_repeats"] == 1


def bundle(agg: dict[str, Any]) -> dict[str, Any]:
    return {"name": "x", "arms": ["a"], "baseline_arm": "a", "aggregates": {"w": {"a": agg}}, "checks": [],
            "verdict": "pass", "provenance": {"engine": {"name": "reference", "version": ""}, "git_sha": "",
                                              "git_dirty": False, "plan_fingerprint": "f"}}


def test_report_reads_the_flag_from_the_bundle() -> None:
    quiet = {"median_ttft_ms": 100.0, "p99_client_delay_ms": 1.0, "completed": 3}
    loud = {"median_ttft_ms": 100.0, "p99_client_delay_ms": 50.0, "completed": 3}
    assert "Client delay flagged" in render_report(bundle({**quiet, "client_delay_flagged": True}))
    assert "Client delay flagged" not in render_report(bundle({**loud, "client_delay_flagged": False}))
    text = render_report(bundle({**loud, "client_delay_flagged": True, "client_delay_flagged_repeats": 1,
                                 "repeats": 3}))
    assert "(a in 1 of 3 repeats)" in text and "p99 50.0 ms" in text
