"""The kl and prefill_overhead checks' verdict rules, from saved samples and trial summaries alone."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hybridbench.checks.base import CheckInput
from hybridbench.checks.correctness import kl, prefill_overhead
from hybridbench.checks.registry import validate_checks
from hybridbench.config.schema import ChecksCfg
from hybridbench.errors import ConfigError
from hybridbench.records.coverage import TrialOutcome
from hybridbench.records.io import RecordWriter
from hybridbench.records.kl import KlSample, k3
from hybridbench.records.schema import Record
from hybridbench.results.reader import read_kl_samples


def sample(arm: str, variant: str = "prefill", *, cached: int | None = 100, min_cached: int = 1,
           hit: tuple[float, ...] = (-1.0, -2.0), ref: tuple[float, ...] = (-1.0, -2.0), error: str = "",
           skipped: str = "", i: int = 0) -> KlSample:
    return KlSample(f"t-{arm}", arm, "w", 0, variant, i, 300, cached, min_cached,  # type: ignore[arg-type]
                    list(hit), list(ref), error, skipped)


def record(arm: str) -> Record:
    return Record("run", f"t-{arm}", arm, "w", 0, 0, 0, 0, 0.0, 0.0, 0.1, 0.2, 100, 5, 0, "ok")


def kl_input(samples: list[KlSample], threshold: float = 1e-3, arms: tuple[str, ...] = ("disabled", "lru"),
             variants: tuple[str, ...] = ("prefill",)) -> CheckInput:
    """``variants``: the planned ones (checks.kl_variants)."""
    by: dict[tuple[str, str], list[KlSample]] = {}
    for s in samples:
        by.setdefault((s.workload, s.arm), []).append(s)
    records = {("w", a): [record(a)] for a in arms}
    return CheckInput(ChecksCfg(kl_variants=list(variants)), arms, arms[0], ("w",), records, {}, {}, 0, by, threshold,
                      cache_off=frozenset({"disabled"}) & set(arms))


def test_k3_is_sglangs_estimator() -> None:
    assert k3([-1.0, -2.0], [-1.0, -2.0]) == 0.0
    r = math.log(2.0)  # ref twice as likely as hit on one token, equal on the other
    assert k3([-1.0 + r, -2.0], [-1.0, -2.0]) == pytest.approx((1.0 - r) / 2)
    assert k3([-1.0 - r], [-1.0]) == pytest.approx(0.5 - 1 + r)  # exp(-r) - 1 + r
    with pytest.raises(ValueError, match="equally long"):
        k3([-1.0], [])


def test_kl_passes_matching_logprobs_and_fails_a_drift() -> None:
    good = [sample("lru", i=i) for i in range(4)]
    (res,) = kl(kl_input(good))
    assert (res.status, res.workload, res.observed) == ("pass", "w/prefill", 0.0)
    drift = [sample("lru", i=i, ref=(-1.0, -2.5)) for i in range(4)]
    (res,) = kl(kl_input(drift))
    assert res.status == "fail" and res.observed == pytest.approx((math.expm1(-0.5) + 0.5) / 2)


def test_kl_needs_more_than_half_of_the_samples_to_hit() -> None:
    # Misses are left out of the mean (as SGLang does), but a cache that rarely hits proves nothing.
    half = [sample("lru", i=0), sample("lru", i=1), sample("lru", i=2, cached=0), sample("lru", i=3, cached=0)]
    (res,) = kl(kl_input(half))
    assert res.status == "fail" and "only 2 of 4" in res.detail
    most = [*half[:3], sample("lru", i=3, cached=5, min_cached=10, ref=(-9.0, -9.0))]  # below the gate: no hit
    (res,) = kl(kl_input([*most, sample("lru", i=4)]))
    assert res.status == "pass" and res.observed == 0.0 and "over 3 hit(s) of 5" in res.detail


def test_kl_fails_on_probe_errors_skips_by_design_and_ignores_the_disabled_arm() -> None:
    (res,) = kl(kl_input([sample("lru"), sample("lru", error="ProbeError: HTTP 500")]))
    assert res.status == "fail" and "HTTP 500" in res.detail
    (res,) = kl(kl_input([sample("lru", skipped="no_buffer: by design", cached=None)]))
    assert res.status == "skip" and "by design" in res.detail
    (res,) = kl(kl_input([sample("disabled")]))  # nothing for lru: KL unmeasured, not skipped into a pass
    assert res.arm == "lru" and res.status == "inconclusive"
    results = kl(kl_input([*(sample("lru", "prefill", i=i) for i in range(4)),
                           sample("lru", "branch", ref=(0.0, 0.0))], variants=("prefill", "branch")))
    assert {(r.workload, r.status) for r in results} == {("w/prefill", "pass"), ("w/branch", "fail")}


def test_a_hit_without_logprobs_fails_as_unmeasured() -> None:
    # It divided by zero (a traceback) when every hit carried none; one among others would shrink the mean.
    (res,) = kl(kl_input([sample("lru", hit=(), ref=())]))
    assert res.status == "fail" and "1 of 1 hit(s) carry no logprobs" in res.detail
    (res,) = kl(kl_input([sample("lru", i=0), sample("lru", i=1), sample("lru", i=2, hit=(), ref=())]))
    assert res.status == "fail" and res.observed is None


def test_a_kl_probe_that_ran_and_wrote_nothing_is_inconclusive_not_skipped() -> None:
    # Every prompt shorter than 8 tokens: the probe ran, wrote 0 samples, and the run passed on its other checks.
    from dataclasses import replace

    base = kl_input([sample("disabled")])
    ran = replace(base, snapshots={("w", "lru"): [{"samples_written": {"kl": 0}}]})
    (res,) = kl(ran)
    assert (res.arm, res.status) == ("lru", "inconclusive") and "no KL samples" in res.detail
    (res,) = kl(base)  # nothing says the probe ran (a re-scoring enabling kl, a run saved before the count)
    assert res.status == "inconclusive" and "did not run" in res.detail, res



def test_kl_rescored_on_cache_off_arms_alone_is_inconclusive_not_a_skip() -> None:
    # A re-scoring's arms are fixed: kl enabled on a run of cache-off arms alone measured nothing (the probe skips
    # them), which was a skip row beside which the run passed.
    from hybridbench.checks.base import run_verdict
    from hybridbench.checks.registry import run_checks

    (row,) = run_checks(["kl"], kl_input([], arms=("disabled",)))
    assert row.status == "inconclusive" and "every arm has the cache off" in row.detail, row
    assert run_verdict(r.status for r in run_checks(["survival", "kl"], kl_input([], arms=("disabled",)))) \
        == "inconclusive"

def test_kl_passes_only_over_every_planned_sample() -> None:
    # One hit of the 4 planned (checks.kl_samples=4; the trial held one prompt of >= 8 tokens) passed: SGLang's
    # "more than half hit" was counted over the samples gathered, 1 of 1, never over those planned.
    from dataclasses import replace

    (res,) = kl(kl_input([sample("lru")]))
    assert (res.status, res.observed) == ("inconclusive", None), res
    assert "1 of 4 planned sample(s) measured" in res.detail and "mean k3 0" in res.detail, res.detail
    (res,) = kl(kl_input([sample("lru", i=i) for i in range(4)]))  # every planned sample measured
    assert res.status == "pass" and "over 4 hit(s) of 4" in res.detail, res
    # Two trials ran and one probed: its 4 samples are 4 of the 8 planned, whatever they show.
    ran = [TrialOutcome(f"t-lru{r}", "w", "lru", r, "ran", 1) for r in range(2)]
    four = [replace(s, trial_id="t-lru0") for s in (sample("lru", i=i) for i in range(4))]
    (res,) = kl(replace(kl_input(four), trials={("w", "lru"): ran}))
    assert res.status == "inconclusive" and "4 of 8 planned sample(s) measured" in res.detail, res.detail
    # A trial that never ran was never to be probed: its samples are not missing.
    gone = [ran[0], TrialOutcome("t-lru1", "w", "lru", 1, "not run", 1)]
    (res,) = kl(replace(kl_input(four), trials={("w", "lru"): gone}))
    assert res.status == "pass", res
    # A divergence stands on the samples there are: a fail needs no full count.
    (res,) = kl(kl_input([sample("lru", ref=(-1.0, -2.5))]))
    assert res.status == "fail", res


def test_a_planned_variant_without_samples_has_an_inconclusive_row() -> None:
    # The rows were built from the variants the samples held: a planned variant whose samples were all lost (the probe
    # stopped after its prefill samples) had no row, and the run passed on the others, every planned sample or not.
    rows = kl(kl_input([sample("lru", i=i) for i in range(4)], variants=("prefill", "decode", "branch")))
    got = {r.workload: r for r in rows}
    assert set(got) == {"w/prefill", "w/decode", "w/branch"}, rows
    assert got["w/prefill"].status == "pass"
    for v in ("w/decode", "w/branch"):
        assert got[v].status == "inconclusive" and "0 of 4 planned sample(s)" in got[v].detail, got[v]


def test_kl_samples_round_trip_through_kl_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "kl.jsonl"
    with RecordWriter(path) as w:
        w.write(sample("lru", cached=7, ref=(-1.0, -2.5)))
        w.write(sample("lru", error="boom", cached=None))
    first, second = read_kl_samples(path)
    assert first == sample("lru", cached=7, ref=(-1.0, -2.5)) and second.error == "boom" and not second.hit
    saved = json.loads(path.read_text().splitlines()[0])
    assert saved["hit"] is True and saved["kl"] == pytest.approx(first.kl)
    assert list(read_kl_samples(tmp_path / "absent.jsonl")) == []


def overhead_input(base: list[float], cand: list[float], arms: tuple[str, ...] = ("disabled", "branching"),
                   floor: float = 0.85) -> CheckInput:
    summaries = {("w", "disabled"): [{"input_throughput": v} for v in base],
                 ("w", "branching"): [{"input_throughput": v} for v in cand]}
    return CheckInput(ChecksCfg(min_prefill_throughput_ratio=floor), arms, arms[0], ("w",), {}, summaries, {}, 0,
                      cache_off=frozenset({"disabled"}) & set(arms))


def test_prefill_overhead_fails_only_below_the_floor_with_confidence() -> None:
    (res,) = prefill_overhead(overhead_input([1000.0, 1010.0, 990.0], [700.0, 705.0, 695.0]))
    assert res.status == "fail" and res.observed == pytest.approx(0.7, abs=1e-3)
    (res,) = prefill_overhead(overhead_input([1000.0, 1010.0, 990.0], [950.0, 960.0, 940.0]))
    assert res.status == "pass" and res.observed == pytest.approx(0.95, abs=1e-3)
    # The seed's own 0.88 passes at its 0.85 floor and fails a stricter one.
    (res,) = prefill_overhead(overhead_input([72806.7] * 3, [64229.5] * 3, floor=0.9))
    assert res.status == "fail" and res.observed == pytest.approx(0.882, abs=1e-3)


def test_prefill_overhead_needs_repeats_and_a_disabled_arm() -> None:
    (res,) = prefill_overhead(overhead_input([1000.0], [500.0]))
    # one repeat: no interval, so a halved throughput is no fail, and (the old skip) no pass either
    assert res.status == "inconclusive" and "1 paired repeat(s)" in res.detail
    results = prefill_overhead(overhead_input([], [500.0, 510.0], arms=("lru", "branching")))
    assert [r.arm for r in results] == ["lru", "branching"]
    # no cache-off arm (the plan refuses it; a re-scoring may not): nothing compared, so never a skip beside a pass
    assert all(r.status == "inconclusive" and "disabled" in r.detail for r in results)


def test_check_config_is_validated_with_the_key_named() -> None:
    with pytest.raises(ConfigError, match=r"checks\.kl_variants: unknown variant.*sideways"):
        validate_checks(ChecksCfg(kl_variants=["prefill", "sideways"]))
    with pytest.raises(ConfigError, match=r"checks\.enabled: unknown check.*klx"):
        validate_checks(ChecksCfg(enabled=["klx"]))
    with pytest.raises(ConfigError, match="kl_samples"):
        validate_checks(ChecksCfg(enabled=["kl"], kl_samples=0))
