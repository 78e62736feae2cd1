"""Metrics from records and the regression checks' verdict rule: pass only with the whole CI inside the tolerance,
fail only with it wholly beyond, inconclusive otherwise (and with one repeat a side)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from hybridbench.checks.base import CheckInput, CheckResult
from hybridbench.checks.builtin import cache_hits, survival, ttft
from hybridbench.config.redact import redact
from hybridbench.config.schema import ChecksCfg
from hybridbench.metrics.stats import bootstrap_relative_change, percentile
from hybridbench.metrics.summary import summarize
from hybridbench.records.schema import Record


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
    return CheckInput(ChecksCfg(**cfg), ("lru", "seglen"), "lru", ("w",), records, {}, {}, 0,
                      cache_off=frozenset())  # type: ignore[arg-type]


def test_one_trial_a_side_decides_no_ttft_verdict_however_far_apart() -> None:
    """A bootstrap over one trial's requests leaves out run-to-run variation: it failed +experiment=l2 at +93.6% on a
    busy machine where the README records a pass. Shown as advisory; the row is inconclusive (exit 1), never a pass
    and never a fail."""
    base = [rec("lru", 100.0 + i % 7, i=i) for i in range(40)]
    tripled = [rec("seglen", 300.0 + i % 7, i=i) for i in range(40)]
    same = [rec("seglen", 100.0 + i % 7, i=i) for i in range(40)]
    for cand in (tripled, same):
        (row,) = ttft(make_input({("w", "lru"): base, ("w", "seglen"): cand}))
        assert row.status == "inconclusive" and row.observed is None and row.limit == pytest.approx(0.10)
        assert "a verdict needs >= 2" in row.detail and "advisory over one trial's 40 requests" in row.detail
    (row,) = ttft(make_input({("w", "lru"): base, ("w", "seglen"): tripled}))
    assert "+194" in row.detail  # the advisory estimate is there to read


def test_with_repeats_ttft_pairs_repeat_means_so_drift_between_repeats_is_not_a_regression() -> None:
    """The seglen main job on a busy 2-core machine: the candidate's per-repeat means swung 342, 106, 192 ms
    while its hits matched the baseline. Pooled requests gave a narrow interval and a false failure;
    pairing repeat means counts the swing as spread. A consistent +50% in every repeat still fails."""
    def trial(arm: str, repeat: int, ttft_ms: float) -> list[Record]:
        return [replace(rec(arm, ttft_ms + i % 5, i=i), repeat=repeat, trial_id=f"{arm}-r{repeat}")
                for i in range(40)]

    def run(base_ms: list[float], cand_ms: list[float]) -> CheckInput:
        records: dict[tuple[str, str], list[Record]] = {("w", "lru"): [], ("w", "seglen"): []}
        summaries: dict[tuple[str, str], list[dict[str, object]]] = {("w", "lru"): [], ("w", "seglen"): []}
        for arm, means in (("lru", base_ms), ("seglen", cand_ms)):
            for r, ms in enumerate(means):
                recs = trial(arm, r, ms)
                records[("w", arm)] += recs
                summaries[("w", arm)].append(summarize(recs))
        return CheckInput(ChecksCfg(), ("lru", "seglen"), "lru", ("w",), records, summaries, {}, 0,
                          cache_off=frozenset())  # type: ignore[arg-type]

    swinging = run([150.0, 160.0, 140.0], [342.0, 106.0, 192.0])
    (drift,) = ttft(swinging)
    # Its interval straddles +10%: no evidence either way, so neither a pass (the old rule) nor a fail.
    assert drift.status == "inconclusive" and "3 paired repeats" in drift.detail
    assert drift.low is not None and drift.high is not None and drift.low < 0.10 < drift.high
    assert drift.repeats_needed is not None and drift.repeats_needed > 3 and drift.mde is not None
    (steady,) = ttft(run([150.0, 160.0, 140.0], [153.0, 162.0, 143.0]))  # +2% in every repeat: inside +10%
    assert steady.status == "pass" and steady.high is not None and steady.high <= 0.10
    base, cand = ([t for r in swinging.records[("w", a)] if (t := r.ttft_ms) is not None] for a in ("lru", "seglen"))
    pooled = bootstrap_relative_change(base, cand, samples=500, confidence=0.95, seed=0)
    assert pooled.low > 0.10  # what the pooled bootstrap would have called a regression
    (slower,) = ttft(run([150.0, 160.0, 140.0], [225.0, 240.0, 212.0]))
    assert slower.status == "fail" and slower.observed == pytest.approx(0.5, abs=0.01)


def test_survival_and_cache_hit_floor() -> None:
    records = {("w", "lru"): [rec("lru", 100.0, cached=0), rec("lru", 100.0, status="error")],
               ("w", "seglen"): [rec("seglen", 100.0, cached=60)]}
    verdicts = {(r.check, r.arm): r.status for r in [*survival(make_input(records)),
                                                      *cache_hits(make_input(records, min_token_hit_rate=0.5))]}
    assert verdicts == {("survival", "lru"): "fail", ("survival", "seglen"): "pass",
                        ("cache_hits", "lru"): "fail", ("cache_hits", "seglen"): "pass"}


def test_exact_hits_that_stopped_mid_trial_are_not_a_pass() -> None:
    # The mirror broke after request 0 (the server returned no output ids): request 0 matching says nothing of 1-2.
    from hybridbench.records.exact_hits import ExactHitSample

    records = {("w", "lru"): [rec("lru", 100.0, i=i, cached=10 * i) for i in range(3)]}
    exact = [ExactHitSample("t-lru", "lru", "w", 0, 0, 0)]
    snaps = {("w", "lru"): [{"prediction": "the server did not return its output token ids"}]}
    base = make_input(records, min_token_hit_rate=0.0)
    inp = replace(base, snapshots=snaps, samples={"exact_hits": exact})
    (row,) = [r for r in cache_hits(inp) if r.workload == "w/exact"]
    assert row.status == "inconclusive" and "predictions stopped in 1 trial(s): the server did not return" in row.detail
    whole = replace(inp, snapshots={("w", "lru"): [{"prediction": "exact"}]})
    assert [r.status for r in cache_hits(whole) if r.workload == "w/exact"] == ["pass"]
    wrong = replace(inp, samples={"exact_hits": [ExactHitSample("t-lru", "lru", "w", 0, 1, 99)]})
    assert [r.status for r in cache_hits(wrong) if r.workload == "w/exact"] == ["fail"]  # a mismatch stays a fail


@pytest.mark.parametrize(("why", "status"), [
    ("the server did not return its output token ids", "inconclusive"),  # the mirror broke at request 0
    ("request 0 failed", "inconclusive"),
    ("/server_info unavailable (timed out)", "inconclusive"),
    ("no prediction: the trial started primed, not cold", "skip"),  # by design: said, not judged
    ("a host tier's asynchronous write-back is not mirrored request by request", "skip"),
])
def test_exact_hits_that_predicted_nothing_are_said_never_left_out(why: str, status: str) -> None:
    # Stopping after request 0 was inconclusive, but stopping before it left no exact row at all: with the floor at
    # its default 0 the sequential run then passed on survival alone.
    records = {("w", "lru"): [rec("lru", 100.0, i=i, cached=10 * i) for i in range(3)]}
    inp = replace(make_input(records), snapshots={("w", "lru"): [{"prediction": why}]}, samples={"exact_hits": []})
    rows = cache_hits(inp)
    assert [(r.workload, r.status) for r in rows] == [("w/exact", status), ("w", "skip")]  # and no floor: said
    assert why in rows[0].detail and "no floor set" in rows[1].detail


def test_a_hit_longer_than_its_prompt_fails_the_floor_instead_of_lifting_it() -> None:
    # A server double-counting its hits (250 cached of a 100-token prompt) read as a 250% hit rate: a pass.
    records = {("w", "lru"): [rec("lru", 100.0, cached=250), rec("lru", 100.0, i=1, cached=0)]}
    (res,) = cache_hits(make_input(records, min_token_hit_rate=0.5))
    assert res.status == "fail" and "1 request(s) report an impossible hit (request 0 r0: 250 cached" in res.detail
    fine = {("w", "lru"): [rec("lru", 100.0, cached=99), rec("lru", 100.0, i=1, cached=0)]}
    assert [r.status for r in cache_hits(make_input(fine, min_token_hit_rate=0.4))] == ["pass"]


@pytest.mark.parametrize("floor", [0.0, 0.5])
def test_impossible_hits_fail_whatever_the_floor_and_any_hit_with_the_cache_off(floor: float) -> None:
    # At the default floor (0) no rate row is written, and a cache-off arm never had one: a build double-counting
    # its hits, or reporting hits with the cache off, passed on survival alone.
    double = {("w", "lru"): [rec("lru", 100.0, cached=250), rec("lru", 100.0, i=1, cached=60)]}
    rows = [r for r in cache_hits(make_input(double, min_token_hit_rate=floor)) if r.status == "fail"]
    assert len(rows) == 1 and "impossible hit (request 0 r0: 250 cached of a" in rows[0].detail
    off = {("w", "disabled"): [rec("disabled", 100.0, cached=0), rec("disabled", 100.0, i=1, cached=40)]}
    inp = replace(make_input(off, min_token_hit_rate=floor), cache_off=frozenset({"disabled"}))
    (row,) = cache_hits(inp)
    assert (row.workload, row.status) == ("w/accounting", "fail") and "request 1 r0: 40 cached" in row.detail
    assert "with the prefix cache off" in row.detail
    both = {("w", "disabled"): [rec("disabled", 100.0, cached=500)]}  # impossible and a hit: one request, once
    (row,) = cache_hits(replace(make_input(both, min_token_hit_rate=floor), cache_off=frozenset({"disabled"})))
    assert row.observed == 1.0 and row.detail.startswith("1 request(s)")
    clean = {("w", "disabled"): [rec("disabled", 100.0, cached=0), rec("disabled", 100.0, i=1, cached=0)]}
    assert cache_hits(replace(make_input(clean, min_token_hit_rate=floor), cache_off=frozenset({"disabled"}))) == []


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


def test_throughput_has_no_pass_without_repeats() -> None:
    from hybridbench.checks.builtin import throughput

    one = {("w", "lru"): [{"request_throughput": 10.0}], ("w", "seglen"): [{"request_throughput": 5.0}]}
    three = {("w", "lru"): [{"request_throughput": 10.0 + i * 0.1} for i in range(3)],
             ("w", "seglen"): [{"request_throughput": 5.0 + i * 0.1} for i in range(3)]}
    base = make_input({})
    (single,) = throughput(CheckInput(base.cfg, base.arms, "lru", ("w",), {}, one, {}, 0, cache_off=frozenset()))
    (repeated,) = throughput(CheckInput(base.cfg, base.arms, "lru", ("w",), {}, three, {}, 0, cache_off=frozenset()))
    # one repeat: no interval, and no pass either; a halved throughput over 3 repeats fails
    assert single.status == "inconclusive" and repeated.status == "fail"
    assert (repeated.estimate, repeated.limit) == pytest.approx((-0.4951, -0.10), abs=1e-3)
    assert repeated.high is not None and repeated.high < -0.10


def test_t_quantiles_match_the_tables() -> None:
    from hybridbench.metrics.stats import t_quantile

    for p, df, want in ((0.975, 2, 4.3027), (0.975, 4, 2.7764), (0.975, 30, 2.0423), (0.95, 1, 6.3138),
                        (0.995, 10, 3.1693), (0.975, 1e6, 1.9600)):
        assert t_quantile(p, df) == pytest.approx(want, abs=1e-4)
    assert t_quantile(0.025, 10) == pytest.approx(-2.2281, abs=1e-4)


def test_a_repeat_without_a_value_pairs_with_nothing_and_raises_nothing() -> None:
    # A trial with no records summarizes to NaN; statistics.stdev raised AttributeError on it (rescore traceback).
    from hybridbench.metrics.stats import paired_relative_change, welch_relative_change

    nan = math.nan
    assert math.isnan(paired_relative_change([10.0, nan], [9.0, 8.0], confidence=0.95).high)  # one pair: no interval
    three = paired_relative_change([10.0, nan, 20.0, 40.0], [9.0, 5.0, 19.0, 34.0], confidence=0.95)
    assert (three.estimate, three.low) == pytest.approx((-0.10, -0.2242), abs=1e-4)  # the three that pair
    assert math.isnan(welch_relative_change([10.0, nan], [9.0, 8.0], confidence=0.95).high)
    assert welch_relative_change([10.0, 10.0, nan], [9.0, 9.0], confidence=0.95).estimate == pytest.approx(-0.1)


def test_a_repeat_without_a_figure_leaves_the_others_no_pass_but_a_fail_stands() -> None:
    # A repeat whose requests completed without a figure (no first token, a modelled stamp lost) was left out and
    # the other repeats passed the arm: the slow repeat may be the one with no figure.
    from hybridbench.checks.builtin import throughput

    def judged(cand: list[float]) -> CheckResult:
        sums = {("w", "lru"): [{"request_throughput": v} for v in (10.0, 20.0, 40.0, 30.0)],
                ("w", "seglen"): [{"request_throughput": v} for v in cand]}
        base = make_input({})
        (res,) = throughput(CheckInput(base.cfg, base.arms, "lru", ("w",), {}, sums, {}, 0, cache_off=frozenset()))
        return res

    assert judged([9.5, 19.0, 38.5, 29.0]).status == "pass"  # all four: -5%, -5%, -3.75%, -3.3%
    holed = judged([9.5, 19.0, math.nan, 29.0])
    assert holed.status == "inconclusive" and "1 repeat(s) without a figure" in holed.detail, holed
    assert judged([5.0, 10.0, math.nan, 15.0]).status == "fail"  # -50% on the three measured: a fail stands


def test_paired_interval_is_honest_about_three_noisy_repeats() -> None:
    from hybridbench.checks.builtin import throughput
    from hybridbench.metrics.stats import paired_relative_change

    ch = paired_relative_change([10.0, 20.0, 40.0], [9.0, 19.0, 34.0], confidence=0.95)
    # ratios -0.10, -0.05, -0.15: mean -0.10, sd 0.05, t(0.975, 2) = 4.3027 -> half-width 0.1242
    assert (ch.estimate, ch.low, ch.high) == pytest.approx((-0.10, -0.2242, 0.0242), abs=1e-4)
    # Pairing by repeat removes what drifts between repeats: a steady -30% under a machine that
    # doubles its speed each repeat is still unambiguous.
    drifting = paired_relative_change([10.0, 20.0, 40.0], [7.0, 14.1, 27.9], confidence=0.95)
    assert drifting.high < -0.28
    # The seglen main job's gsp throughputs on a shared 2-core machine: a -20% point estimate whose
    # three repeats cannot exclude -10%; a bootstrap of three values claimed they could.
    noisy = {("w", "lru"): [{"request_throughput": v} for v in (70.02, 87.22, 69.70)],
             ("w", "seglen"): [{"request_throughput": v} for v in (62.85, 62.74, 56.98)]}
    base = make_input({})
    (res,) = throughput(CheckInput(base.cfg, base.arms, "lru", ("w",), {}, noisy, {}, 0, cache_off=frozenset()))
    # -18.9% whose interval reaches both sides of -10%: the old rule passed it; it decided nothing
    assert res.status == "inconclusive" and res.observed == pytest.approx(-0.1885, abs=1e-3)
    assert res.low is not None and res.high is not None and res.low < -0.10 < res.high
    bootstrap = bootstrap_relative_change([70.02, 87.22, 69.70], [62.85, 62.74, 56.98], samples=1000,
                                          confidence=0.95, seed=0)
    assert bootstrap.high < -0.10  # what the old rule would have failed on


def test_aggregate_rates_are_per_repeat_means_not_pooled_clocks() -> None:
    from hybridbench.metrics.summary import aggregate

    trials = [[rec("a", 100.0, i=i) for i in range(10)] for _ in range(2)]  # each repeat's clock starts at 0
    agg = aggregate([r for t in trials for r in t], [summarize(t) for t in trials])
    assert agg["request_throughput"] == pytest.approx(summarize(trials[0])["request_throughput"])
    assert agg["completed"] == 20 and agg["repeats"] == 2
    pooled = summarize([r for t in trials for r in t])["request_throughput"]
    assert pooled == pytest.approx(2 * agg["request_throughput"])  # the overlap a pooled clock would report


def test_without_a_floor_the_hit_rate_is_shown_as_not_judged_never_as_nothing_to_judge() -> None:
    # With checks.min_token_hit_rate=0 (seglen, noise, l2) the row vanished and the check said "found nothing in
    # this run to judge", though a cache-on arm had records: a build that stopped hitting read the same.
    records = {("w", "lru"): [rec("lru", 100.0, cached=0), rec("lru", 100.0, i=1, cached=0)],
               ("w", "seglen"): [rec("seglen", 100.0, cached=60)]}
    rows = {r.arm: r for r in cache_hits(make_input(records, min_token_hit_rate=0.0))}
    assert {a: r.status for a, r in rows.items()} == {"lru": "skip", "seglen": "skip"}
    assert rows["lru"].detail == ("0.0% of prompt tokens cached; no floor set (checks.min_token_hit_rate=0), "
                                  "so not judged")
    assert rows["seglen"].observed == pytest.approx(0.6)


def test_requests_with_no_hit_count_are_unknown_not_misses() -> None:
    # An engine that sends no cached-token count: read as 0, the arm failed its floor ("0.0% of prompt tokens
    # cached") for hits nobody measured. Unknown counts bound the rate; only a floor outside both bounds decides.
    none = {("w", "lru"): [rec("lru", 100.0, cached=None), rec("lru", 100.0, i=1, cached=None)]}  # type: ignore[arg-type]
    (row,) = cache_hits(make_input(none, min_token_hit_rate=0.5))
    assert (row.status, row.observed) == ("inconclusive", None) and "2 of 2 completed request(s)" in row.detail
    some = {("w", "lru"): [rec("lru", 100.0, cached=80), rec("lru", 100.0, i=1, cached=None)]}  # type: ignore[arg-type]
    assert [r.status for r in cache_hits(make_input(some, min_token_hit_rate=0.3))] == ["pass"]  # >= 40% either way
    assert [r.status for r in cache_hits(make_input(some, min_token_hit_rate=0.5))] == ["inconclusive"]  # 40%..90%
    assert [r.status for r in cache_hits(make_input(some, min_token_hit_rate=0.95))] == ["fail"]  # 90% at most
    lost = {("w", "lru"): [rec("lru", 100.0, status="error")]}  # nothing completed: no rate, not a 0% one
    (row,) = cache_hits(make_input(lost, min_token_hit_rate=0.5))
    assert (row.status, row.observed) == ("inconclusive", None) and "no completed request" in row.detail
