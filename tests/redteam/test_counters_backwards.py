"""A server counter that went backwards within a trial (a restart mid-trial, a broken scrape) counted nothing
knowable: clamped to 0 (or read as it came) it made eviction, host and Marconi verdicts pass on no evidence."""

from __future__ import annotations

from typing import Any

from hybridbench.checks.base import CheckInput
from hybridbench.checks.evictions import evictions, host_hits
from hybridbench.checks.log_hits import usage_vs_log
from hybridbench.checks.marconi import marconi_trends
from hybridbench.config.schema import ChecksCfg
from hybridbench.engines.evictions import Evictions
from hybridbench.engines.server_logs import CacheCounters
from hybridbench.records.coverage import TrialOutcome
from hybridbench.records.schema import LOG_COUNTS_USAGE_HITS, Record


def test_a_counter_lower_after_the_trial_than_before_is_unknown_not_zero() -> None:
    # A restart between the two scrapes: 40 evicted tokens after, 500 before. max(0, -460) said "0 evicted".
    delta = Evictions(40.0, 2.0, 10.0, host_source="metrics").since(Evictions(500.0, 1.0, 90.0, host_source="metrics"))
    assert delta.tokens is None and delta.host_loaded is None
    assert delta.states == 1.0  # the counter that grew still counts
    assert CacheCounters(5.0, 100.0).since(CacheCounters(50.0, 60.0)).known is False
    assert CacheCounters(50.0, 100.0).since(CacheCounters(5.0, 60.0)).known is True


def _inp(snaps: dict[str, list[dict[str, Any]]], arms: tuple[str, ...], **kw: Any) -> CheckInput:
    return CheckInput(ChecksCfg(), arms, arms[0], ("w",), kw.pop("records", {}), {},
                      {("w", a): s for a, s in snaps.items()}, 0, **kw)


def test_a_negative_saved_counter_is_no_evidence_of_eviction_or_load_back() -> None:
    # A snapshot saved with a negative count (before the harness refused them): truthy, it read as "evicted".
    (row,) = evictions(_inp({"lru": [{"evicted_tokens": -460, "evicted_states": None}]}, ("lru",)))
    assert row.status == "inconclusive", row
    (host,) = host_hits(_inp({"l2": [{"evicted_tokens": 900, "evicted_states": 4, "host_loaded_tokens": -80}]},
                             ("branching", "l2")))
    assert host.status == "inconclusive", host
    (host,) = host_hits(_inp({"l2": [{"evicted_tokens": -900, "evicted_states": None, "host_loaded_tokens": 80}]},
                             ("branching", "l2")))
    assert host.status == "inconclusive", host


def _rec(arm: str, i: int, cached: int, trial: str = "t0") -> Record:
    return Record("r", trial, arm, "w", 0, i, i, 0, 0.0, 0.0, 0.1, 0.2, 100, 4, cached, "ok")


def test_a_negative_hit_count_never_lifts_one_arm_above_another() -> None:
    # The baseline's -50 made its rate negative, so marconi's 10% "beat" it.
    records = {("w", "marconi"): [_rec("marconi", i, 10) for i in range(4)],
               ("w", "sglang_plus"): [_rec("sglang_plus", 0, -50), *(_rec("sglang_plus", i, 10) for i in (1, 2, 3))]}
    snaps = {a: [{"evicted_states": 3, "evicted_tokens": 0}] for a in ("marconi", "sglang_plus")}
    (row,) = marconi_trends(_inp(snaps, ("sglang_plus", "marconi"), records=records))
    assert row.status != "pass", row
    assert "impossible" in row.detail


def test_negative_usage_hits_summing_to_the_log_total_do_not_agree_with_it() -> None:
    recs = [_rec("lru", 0, -30), _rec("lru", 1, 30)]  # sums to the log's 0: agreement about nothing
    snap = {LOG_COUNTS_USAGE_HITS: True, "log_cached_tokens": 0, "log_prefill_batches": 2}
    row = usage_vs_log("w", "lru", [TrialOutcome("t0", "w", "lru", 0, "ran", 2)], [snap], recs)
    assert row is not None and row.status != "pass", row
