"""Metrics from records and the regression checks' verdict rule (fail only past the whole CI)."""

from __future__ import annotations

import pytest

from hybridbench.checks.base import CheckInput
from hybridbench.checks.builtin import cache_hits, survival, ttft
from hybridbench.config.schema import ChecksCfg
from hybridbench.metrics.stats import bootstrap_relative_change, percentile
from hybridbench.metrics.summary import summarize
from hybridbench.records.schema import Record
from hybridbench.results.bundle import redact


def rec(arm: str, ttft_ms: float, *, i: int = 0, out: int = 5, cached: int = 0, status: str = "ok") -> Record:
    sent = float(i)
    return Record("run", f"t-{arm}", arm, "w", 0, i, i, 0, sent, sent, sent + ttft_ms / 1e3,
                  sent + ttft_ms / 1e3 + 0.01 * (out - 1), 100, out, cached, status,  # type: ignore[arg-type]
                  itl_ms=[10.0] * (out - 1))


def test_summary_follows_bench_serving_definitions() -> None:
    records = [rec("a", 100.0, i=0, cached=50), rec("a", 300.0, i=1, cached=0)]
    s = summarize(records)
    assert s["completed"] == 2 and s["mean_ttft_ms"] == pytest.approx(200.0)
    assert s["median_ttft_ms"] == pytest.approx(200.0)
    assert s["mean_tpot_ms"] == pytest.approx(10.0)  # (e2e - ttft) / (output - 1)
    assert s["duration"] == pytest.approx(1.3 + 0.04)
    assert s["request_throughput"] == pytest.approx(2 / 1.34)
    assert s["token_hit_rate"] == pytest.approx(50 / 200) and s["request_hit_rate"] == 0.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)


def test_bootstrap_interval_brackets_the_estimate_and_is_seeded() -> None:
    base = [100.0 + i for i in range(50)]
    cand = [130.0 + i for i in range(50)]
    ch = bootstrap_relative_change(base, cand, samples=500, confidence=0.95, seed=1)
    assert ch.low < ch.estimate < ch.high and ch.estimate == pytest.approx(30 / 124.5, rel=1e-6)
    assert ch == bootstrap_relative_change(base, cand, samples=500, confidence=0.95, seed=1)


def make_input(records: dict[tuple[str, str], list[Record]], **cfg: float) -> CheckInput:
    return CheckInput(ChecksCfg(**cfg), ("lru", "seglen"), "lru", ("w",), records, {}, {}, 0)  # type: ignore[arg-type]


def test_ttft_fails_only_when_the_whole_interval_is_past_the_threshold() -> None:
    base = [rec("lru", 100.0 + i % 7, i=i) for i in range(40)]
    slower = [rec("seglen", 150.0 + i % 7, i=i) for i in range(40)]
    noisy = [rec("seglen", 100.0 + (i % 2) * 40, i=i) for i in range(40)]  # +20% mean, very noisy
    (bad,) = ttft(make_input({("w", "lru"): base, ("w", "seglen"): slower}))
    assert bad.status == "fail" and bad.observed == pytest.approx(0.485, abs=0.01)
    (fine,) = ttft(make_input({("w", "lru"): base, ("w", "seglen"): noisy}, ttft_regression=0.5))
    assert fine.status == "pass"


def test_survival_and_cache_hit_floor() -> None:
    records = {("w", "lru"): [rec("lru", 100.0, cached=0), rec("lru", 100.0, status="error")],
               ("w", "seglen"): [rec("seglen", 100.0, cached=60)]}
    verdicts = {(r.check, r.arm): r.status for r in [*survival(make_input(records)),
                                                      *cache_hits(make_input(records, min_token_hit_rate=0.5))]}
    assert verdicts == {("survival", "lru"): "fail", ("survival", "seglen"): "pass",
                        ("cache_hits", "lru"): "fail", ("cache_hits", "seglen"): "pass"}


def test_secrets_are_redacted_from_launch_commands() -> None:
    cmd = ["python", "-m", "sglang.launch_server", "--api-key", "s3cret", "--hf-token=abc", "HF_TOKEN=xyz", "--tp", "4"]
    assert redact(cmd) == ["python", "-m", "sglang.launch_server", "--api-key", "***", "--hf-token=***",
                           "HF_TOKEN=***", "--tp", "4"]


def test_report_flags_a_client_that_fell_behind_its_schedule() -> None:
    from hybridbench.report.markdown import render_report

    def bundle(delay: float) -> dict[str, object]:
        agg = {"median_ttft_ms": 100.0, "p99_client_delay_ms": delay, "completed": 3}
        return {"name": "x", "arms": ["a"], "baseline_arm": "a", "aggregates": {"w": {"a": agg}}, "checks": [],
                "verdict": "pass", "provenance": {"engine": {"name": "reference", "version": ""}, "git_sha": "",
                                                  "git_dirty": False, "plan_fingerprint": "f"}}
    assert "Client delay flagged" in render_report(bundle(50.0))
    assert "Client delay flagged" not in render_report(bundle(2.0))


def test_throughput_has_no_verdict_without_repeats() -> None:
    from hybridbench.checks.builtin import throughput

    one = {("w", "lru"): [{"request_throughput": 10.0}], ("w", "seglen"): [{"request_throughput": 5.0}]}
    three = {("w", "lru"): [{"request_throughput": 10.0 + i * 0.1} for i in range(3)],
             ("w", "seglen"): [{"request_throughput": 5.0 + i * 0.1} for i in range(3)]}
    base = make_input({})
    (single,) = throughput(CheckInput(base.cfg, base.arms, "lru", ("w",), {}, one, {}, 0))
    (repeated,) = throughput(CheckInput(base.cfg, base.arms, "lru", ("w",), {}, three, {}, 0))
    assert single.status == "skip" and repeated.status == "fail"  # a halved throughput over 3 repeats fails
