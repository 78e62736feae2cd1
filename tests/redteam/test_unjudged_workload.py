"""A workload whose ``judged_by`` names only checks that are switched off was judged by survival alone, and the run
passed as if what the load was built to test had been tested."""

from __future__ import annotations

from hybridbench.checks.base import run_verdict
from hybridbench.config.schema import ChecksCfg
from hybridbench.records.coverage import TrialOutcome
from hybridbench.records.schema import Record
from hybridbench.results.score import ScoreSettings, score_trials


def _score(enabled: list[str], judged_by: dict[str, frozenset[str]]) -> tuple[str, list[str]]:
    recs = [Record("run", "t0", "lru", "w", 0, i, i, 0, i * 0.1, i * 0.1, i * 0.1 + 0.05, i * 0.1 + 0.08, 100, 4, 50,
                   "ok") for i in range(5)]
    scored = score_trials([TrialOutcome("t0", "w", "lru", 0, "ran", 5)], {"t0": recs}, {"t0": {}}, [],
                          arms=("lru",), baseline_arm="lru", workloads=("w",),
                          settings=ScoreSettings(ChecksCfg(enabled=enabled), 0, 1e-6, judged_by=judged_by))
    return run_verdict(c.status for c in scored.checks), [c.detail for c in scored.checks if c.status == "inconclusive"]


def test_a_workload_whose_judging_checks_are_all_disabled_is_inconclusive() -> None:
    verdict, why = _score(["survival", "ttft"], {"w": frozenset({"evictions", "host_hits"})})
    assert verdict == "inconclusive"
    assert any("evictions" in d and "checks.enabled" in d and "workloads.w.judged_by" in d for d in why), why


def test_survival_alone_passes_where_survival_alone_was_asked_for() -> None:
    # the user asked only whether the server survived: that is a decided question, not a gap
    assert _score(["survival", "ttft"], {"w": frozenset({"survival"})})[0] == "pass"
    assert _score(["survival"], {})[0] == "pass"
    assert _score(["survival"], {"w": frozenset({"evictions", "host_hits"})})[0] == "pass"  # survival alone asked
    # one of the workload's checks is enabled and decides it: the disabled one is not all it tests
    assert _score(["survival", "cache_hits"], {"w": frozenset({"cache_hits", "evictions"})})[0] == "pass"
