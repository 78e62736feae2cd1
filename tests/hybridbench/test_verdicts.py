"""Three outcomes for every interval judgement (hybridbench.metrics.decision): pass only with the whole interval inside
the tolerance, fail only with it wholly beyond, inconclusive otherwise — with the MDE and the repeats a decision
needs; and each place that judged an interval shown not to turn an undecided one into a pass."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from typing import Any

import pytest

from hybridbench.checks.base import CheckInput, CheckResult
from hybridbench.checks.builtin import throughput, ttft
from hybridbench.checks.correctness import prefill_overhead
from hybridbench.checks.registry import _no_nan_pass
from hybridbench.config.schema import ChecksCfg, EngineCfg, RunCfg
from hybridbench.config.validate import validate_config
from hybridbench.errors import ConfigError
from hybridbench.metrics.decision import judge, repeats_needed
from hybridbench.metrics.noise import noise_floor
from hybridbench.metrics.paired_accuracy import Answer, flip_test
from hybridbench.metrics.stats import RelativeChange, paired_relative_change
from hybridbench.metrics.summary import summarize
from hybridbench.records.schema import Record


@pytest.mark.parametrize(("low", "high", "worse", "status"), [
    (-0.05, 0.08, "above", "pass"),  # all of it at or under +10%
    (-0.05, 0.10, "above", "pass"),  # touching the limit is inside it
    (0.02, 0.15, "above", "inconclusive"),  # straddles +10%: the old rule's pass
    (-0.30, 0.38, "above", "inconclusive"),  # the gsp row: +4.1% (-29.6% .. +37.7%)
    (0.11, 0.40, "above", "fail"),
    (-0.08, 0.05, "below", "pass"),  # throughput, limit -10%
    (-0.35, -0.03, "below", "inconclusive"),
    (-0.40, -0.12, "below", "fail"),
])
def test_three_outcomes_from_the_interval_and_the_limit(low: float, high: float, worse: str, status: str) -> None:
    limit = 0.10 if worse == "above" else -0.10
    j = judge(RelativeChange((low + high) / 2, low, high, 0.05, 2, 3), limit=limit, worse=worse,  # type: ignore[arg-type]
              confidence=0.95)
    assert j.status == status and j.limit == limit


def test_nan_decides_nothing() -> None:
    for ch in (RelativeChange(math.nan, math.nan, math.nan), RelativeChange(0.0, math.nan, 0.01)):
        assert judge(ch, limit=0.1, worse="above", confidence=0.95).status == "inconclusive"


def test_mde_and_repeats_needed_follow_the_spread() -> None:
    ch = paired_relative_change([1.0] * 3, [1.02, 1.06, 0.98], confidence=0.95)
    j = judge(ch, limit=0.10, worse="above", confidence=0.95)
    # se = sd 0.04 / sqrt(3); MDE = (t(.975,2) + t(.8,2)) * se = (4.303 + 1.061) * 0.0231
    assert j.mde == pytest.approx((4.3027 + 1.0607) * 0.04 / math.sqrt(3), rel=1e-3)
    assert j.status == "inconclusive" and j.repeats_needed is not None and j.repeats_needed > 3
    # At the estimated count, the same mean and spread decide: the interval no longer reaches the limit.
    n = j.repeats_needed
    rng = random.Random(0)
    ratios = [rng.gauss(0, 1) for _ in range(n)]
    m, s = statistics.fmean(ratios), statistics.stdev(ratios)
    cand = [1 + ch.estimate + 0.04 * (r - m) / s for r in ratios]  # exactly the run's mean and sd
    assert judge(paired_relative_change([1.0] * n, cand, confidence=0.95), limit=0.10, worse="above",
                 confidence=0.95).status == "pass"
    assert repeats_needed(RelativeChange(0.10, 0.0, 0.2, 0.05, 2, 3), 0.10, confidence=0.95) is None  # on the limit


def inp(summaries: dict[tuple[str, str], list[dict[str, Any]]], *, timing: str = "wall",
        records: dict[tuple[str, str], list[Record]] | None = None, **cfg: Any) -> CheckInput:
    arms = tuple(dict.fromkeys(a for _, a in summaries))
    recs = records if records is not None else {k: [_rec(k[1])] for k in summaries}
    return CheckInput(ChecksCfg(**cfg), arms, arms[0], ("w",), recs, summaries, {}, 0,
                      cache_off=frozenset(a for a in arms if a == "disabled"), timing=timing)


def _rec(arm: str) -> Record:
    return Record("run", f"t-{arm}", arm, "w", 0, 0, 0, 0, 0.0, 0.0, 0.1, 0.2, 100, 5, 0, "ok")


def test_the_timing_checks_judge_the_clock_timing_names() -> None:
    """Wall time swings (a straddling interval); the modelled clock of the same repeats is steady (a pass). The check
    reads the clock CheckInput.timing names, and says which in its row."""
    wall = {"lru": (100.0, 160.0, 120.0), "seglen": (150.0, 110.0, 130.0)}
    modelled = {"lru": (50.0, 50.5, 50.2), "seglen": (50.3, 50.4, 50.1)}
    sums = {("w", arm): [{"mean_ttft_ms": w, "modelled_mean_ttft_ms": m, "request_throughput": 1e3 / w,
                          "modelled_request_throughput": 1e3 / m}
                         for w, m in zip(wall[arm], modelled[arm], strict=True)] for arm in ("lru", "seglen")}
    (w_ttft,), (m_ttft,) = ttft(inp(sums)), ttft(inp(sums, timing="modelled"))
    assert w_ttft.status == "inconclusive" and "wall time" in w_ttft.detail
    # The simulator's records hold modelled times in their wall-clock fields (modelled=True): named as such.
    sim = {k: [dataclasses.replace(_rec(k[1]), modelled=True)] for k in sums}
    (s_ttft,) = ttft(inp(sums, records=sim))
    assert "simulated time" in s_ttft.detail and "wall" not in s_ttft.detail + s_ttft.expected
    assert m_ttft.status == "pass" and "modelled time" in m_ttft.detail and "modelled" in m_ttft.expected
    (w_tp,), (m_tp,) = throughput(inp(sums)), throughput(inp(sums, timing="modelled"))
    assert w_tp.status == "inconclusive" and m_tp.status == "pass"
    # A server that reported no modelled clock leaves the modelled rows undecided, never passed.
    bare = {k: [{"mean_ttft_ms": s["mean_ttft_ms"], "request_throughput": s["request_throughput"]} for s in v]
            for k, v in sums.items()}
    assert [r.status for r in ttft(inp(bare, timing="modelled"))] == ["inconclusive"]


def test_every_regression_row_carries_its_numbers() -> None:
    sums = {("w", "lru"): [{"mean_ttft_ms": v, "request_throughput": 1.0} for v in (100.0, 101.0, 99.0)],
            ("w", "seglen"): [{"mean_ttft_ms": v, "request_throughput": 1.0} for v in (130.0, 131.0, 129.5)]}
    (row,) = ttft(inp(sums))
    assert row.status == "fail"
    assert all(isinstance(getattr(row, k), float) for k in ("estimate", "low", "high", "limit", "mde"))
    assert row.low is not None and row.limit is not None and row.low > row.limit


@pytest.mark.parametrize(("cand", "status"), [
    ((95.0,), "inconclusive"),  # one repeat: no interval (was a skip)
    ((90.0, 70.0, 95.0), "inconclusive"),  # ratio interval reaches below 0.85 and above it (was a pass)
    ((96.0, 97.0, 95.5), "pass"),
    ((60.0, 61.0, 59.0), "fail"),
])
def test_prefill_overhead_three_outcomes(cand: tuple[float, ...], status: str) -> None:
    sums = {("w", "disabled"): [{"input_throughput": 100.0}] * len(cand),
            ("w", "lru"): [{"input_throughput": v} for v in cand]}
    (row,) = prefill_overhead(inp(sums))
    assert row.status == status and row.limit == pytest.approx(0.85)


def test_a_nan_pass_is_inconclusive_not_a_pass() -> None:
    row = CheckResult("ttft", "w", "lru", "pass", math.nan, "", "")
    assert _no_nan_pass(row).status == "inconclusive"


def _answers(correct: list[bool]) -> dict[str, Answer]:
    return {f"q/{i}": Answer(f"q/{i}", "x", "x", c) for i, c in enumerate(correct)}


def test_accuracy_paired_mode_passes_only_when_enough_questions_bound_the_drop() -> None:
    from hybridbench.checks.accuracy import _verdict
    from hybridbench.records.accuracy import AccuracySample

    rows = [AccuracySample("t", "lru", "accuracy", 0, "cold", "paired", "q", 0, "x", "x", "x", True)]

    def row(n: int, lost: int) -> CheckResult:
        base = _answers([True] * n)
        cand = _answers([i >= lost for i in range(n)])
        return _verdict("accuracy/cold", "lru", "", base, cand, rows=rows,
                        inp=inp({("w", "lru"): []}, accuracy_tolerance=0.05))

    assert row(10, 0).status == "inconclusive"  # no flip in 10 questions cannot bound a drop to 5%
    assert row(400, 0).status == "pass" and flip_test(_answers([True]), _answers([True])).questions == 1
    assert row(400, 60).status == "fail"


def test_validation_keeps_modelled_time_and_the_planted_slowdown_on_the_reference_engine() -> None:
    validate_config(RunCfg(engine=EngineCfg(name="reference", timing="modelled")))
    with pytest.raises(ConfigError, match=r"engine\.timing=modelled: engine 'sglang'"):
        validate_config(RunCfg(engine=EngineCfg(name="sglang", timing="modelled")))
    with pytest.raises(ConfigError, match=r"engine\.timing must be one of wall, modelled"):
        validate_config(RunCfg(engine=EngineCfg(name="reference", timing="cpu")))
    with pytest.raises(ConfigError, match=r"prefill_slowdown\.lru: the planted prefill slowdown is a reference-server"):
        validate_config(RunCfg(arms=["disabled", "lru"], engine=EngineCfg(name="vllm", prefill_slowdown={"lru": 0.25})))
    with pytest.raises(ConfigError, match=r"prefill_slowdown\.seglen: not an arm"):
        validate_config(RunCfg(arms=["disabled", "lru"], engine=EngineCfg(name="reference",
                                                                         prefill_slowdown={"seglen": 0.25})))


def test_modelled_summary_and_noise_floor() -> None:
    def trial(arm: str, repeat: int, ttft_s: float) -> dict[str, Any]:
        recs = [Record("run", f"{arm}-{repeat}", arm, "w", repeat, i, i, 0, 0.0, 0.0, 0.5, 1.0, 100, 5, 0, "ok",
                       modelled_received_s=10.0 * i, modelled_first_token_s=10.0 * i + ttft_s,
                       modelled_end_s=10.0 * i + 2 * ttft_s) for i in range(4)]
        return {"workload": "w", "arm": arm, "repeat": repeat, "summary": summarize(recs)}

    s = trial("a", 0, 0.2)["summary"]
    assert s["modelled_mean_ttft_ms"] == pytest.approx(200.0) and s["modelled_duration"] == pytest.approx(30.4)
    assert s["modelled_request_throughput"] == pytest.approx(4 / 30.4)
    trials = [trial(arm, r, t) for r, (a, b) in enumerate(((0.2, 0.21), (0.2, 0.19), (0.2, 0.2)))
              for arm, t in (("a", a), ("a@copy", b))]
    rows = {r.metric: r for r in noise_floor(trials, baseline="a", confidence=0.95)}
    ttft_row = rows["modelled_mean_ttft_ms"]
    assert ttft_row.repeats == 3 and ttft_row.sd == pytest.approx(0.05, abs=1e-9)
    assert ttft_row.half_width == pytest.approx(4.3027 * 0.05 / math.sqrt(3), rel=1e-3)
    assert "mean_ttft_ms" in rows  # the wall clock's too


def test_modelled_stamps_out_of_order_are_unknown_not_a_faster_ttft() -> None:
    """A first token stamped before its receipt made a negative modelled TTFT, and the ttft check on the modelled
    clock passed at -980%; like the wall clock's (records.timed), such stamps measure nothing."""
    def recs(first: float, end: float) -> list[Record]:
        return [Record("run", "t", "a", "w", 0, i, i, 0, 0.0, 0.0, 0.5, 1.0, 100, 5, 0, "ok",
                       modelled_received_s=10.0 * i, modelled_first_token_s=10.0 * i + first,
                       modelled_end_s=10.0 * i + end) for i in range(4)]

    assert summarize(recs(0.2, 0.4))["modelled_mean_ttft_ms"] == pytest.approx(200.0)
    for first, end in ((-5.0, 0.4), (0.2, 0.1), (0.2, -5.0)):
        s = summarize(recs(first, end))
        assert math.isnan(s["modelled_mean_ttft_ms"]) and math.isnan(s["modelled_request_throughput"]), (first, end)


def test_the_reference_command_carries_the_planted_slowdown_and_the_closed_loop_lockstep() -> None:
    from hybridbench.config.schema import LoadCfg
    from hybridbench.engines.reference_cmd import LOCKSTEP_MS, reference_command
    from hybridbench.plan.arms import plan_arm

    def cmd(arm: str, *, timing: str = "modelled", kind: str = "closed") -> list[str]:
        cfg = RunCfg(arms=["branching", "branching@copy"], load=LoadCfg(kind=kind),
                     engine=EngineCfg(name="reference", timing=timing, prefill_slowdown={"branching@copy": 0.25}))
        return reference_command(cfg, plan_arm(arm), 30000)

    copy = cmd("branching@copy")
    assert copy[copy.index("--prefill-slowdown") + 1] == "0.25" and copy[copy.index("--arm") + 1] == "branching@copy"
    assert "--prefill-slowdown" not in cmd("branching")  # only the arm it names
    assert copy[copy.index("--modelled-lockstep-ms") + 1] == str(LOCKSTEP_MS)
    # a wall-clock judgement or an open loop (arrivals not driven by finishes) must not wait for arrivals
    assert "--modelled-lockstep-ms" not in cmd("branching", timing="wall")
    assert "--modelled-lockstep-ms" not in cmd("branching", kind="poisson")
