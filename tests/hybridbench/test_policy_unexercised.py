"""A timing verdict between arms that differ in their eviction policy alone (seglen against branching) is evidence
about the policy only if the policy changed something. +experiment=seglen engine=sim read "+0.0% (CI +0.0% ..
+0.0%)" and passed every ttft and throughput row: at the GPU sizing's 387 state slots both arms evicted only leaves no
later request asked for, so every request found the same hits in both arms, and the simulator's clock, which has no
cost for the policy itself, ran the same computation twice. On a modelled clock such a row is inconclusive, never a
pass; on a wall clock the pass stands (it measures the policy's own cost)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from hybridbench.checks.base import CheckInput, run_verdict
from hybridbench.checks.builtin import UNEXERCISED, throughput, ttft
from hybridbench.config.schema import ArmCfg, ChecksCfg
from hybridbench.metrics.summary import summarize
from hybridbench.plan.arms import plan_arms, policy_only_arms, saved_specs
from hybridbench.plan.repeats import undecided
from hybridbench.records.schema import Record
from hybridbench.rescore.__main__ import main as rescore

ROOT = Path(__file__).resolve().parents[2]


def _records(arm: str, *, modelled: bool, hits: dict[tuple[int, int], int] | None = None) -> list[Record]:
    """Three repeats of 20 requests, the same times in either arm (as the simulator gives them for equal hits)."""
    out = []
    for repeat in range(3):
        for i in range(20):
            sent = float(i)
            ttft_s = 0.2 + 0.01 * (i % 3) + 0.001 * repeat
            cached = (hits or {}).get((repeat, i), 64 if i % 2 else 0)
            out.append(Record("run", f"{arm}-r{repeat}", arm, "w", repeat, i, i, 0, sent, sent, sent + ttft_s,
                              sent + ttft_s + 0.5, 300, 20, cached, "ok", modelled=modelled))
    return out


def _input(base: list[Record], cand: list[Record], policy_only: frozenset[str]) -> CheckInput:
    records = {("w", "branching"): base, ("w", "seglen"): cand}
    summaries = {k: [summarize([r for r in v if r.repeat == n]) for n in range(3)] for k, v in records.items()}
    return CheckInput(ChecksCfg(), ("branching", "seglen"), "branching", ("w",), records, summaries, {}, 0,
                      policy_only=policy_only)


SEGLEN = frozenset({"seglen"})


def test_identical_hits_on_the_simulated_clock_are_inconclusive_not_a_pass() -> None:
    inp = _input(_records("branching", modelled=True), _records("seglen", modelled=True), SEGLEN)
    rows = [*ttft(inp), *throughput(inp)]
    assert [r.status for r in rows] == ["inconclusive", "inconclusive"]
    assert all(r.detail.startswith(UNEXERCISED) and "60 requests, 3 repeat(s)" in r.detail for r in rows)
    assert all("+0.0% (CI +0.0% .. +0.0%)" in r.detail and r.estimate == 0.0 for r in rows)  # the numbers stay
    assert run_verdict(r.status for r in rows) == "inconclusive"
    assert undecided(rows) == []  # another repeat of the same model would not exercise the policy either


def test_one_request_with_other_hits_lets_the_row_decide() -> None:
    cand = _records("seglen", modelled=True, hits={(2, 7): 128})
    rows = [*ttft(_input(_records("branching", modelled=True), cand, SEGLEN)),
            *throughput(_input(_records("branching", modelled=True), cand, SEGLEN))]
    assert [r.status for r in rows] == ["pass", "pass"]


def test_a_wall_clock_pass_stands_and_so_does_a_comparison_of_more_than_the_policy() -> None:
    """A real engine's wall clock carries the policy's own cost even where the hits match: its pass is evidence. And
    arms that differ in more than the policy (a strategy, a host tier) are not judged by this rule."""
    wall = _input(_records("branching", modelled=False), _records("seglen", modelled=False), SEGLEN)
    assert [r.status for r in (*ttft(wall), *throughput(wall))] == ["pass", "pass"]
    other = _input(_records("branching", modelled=True), _records("seglen", modelled=True), frozenset())
    assert [r.status for r in (*ttft(other), *throughput(other))] == ["pass", "pass"]
    modelled = dataclasses.replace(other, policy_only=SEGLEN, timing="modelled",
                                   records={k: [dataclasses.replace(r, modelled=False) for r in v]
                                            for k, v in other.records.items()},
                                   trial_summaries={k: [{**s, "modelled_mean_ttft_ms": s["mean_ttft_ms"],
                                                         "modelled_request_throughput": s["request_throughput"]}
                                                        for s in v] for k, v in other.trial_summaries.items()})
    assert [r.status for r in (*ttft(modelled), *throughput(modelled))] == ["inconclusive", "inconclusive"]


def test_policy_only_arms_are_those_that_differ_from_the_baseline_in_the_policy_alone() -> None:
    specs = plan_arms(["disabled", "lru", "branching", "seglen", "l2", "branching@copy", "seglen+l2"], ArmCfg())
    assert policy_only_arms(specs, "branching") == {"seglen"}
    assert policy_only_arms(specs, "l2") == {"seglen+l2"}
    assert policy_only_arms(specs, "disabled") == frozenset()
    assert policy_only_arms(saved_specs(("branching", "seglen", "gone")), "branching") == {"seglen"}


def test_the_seglen_comparison_on_the_simulator_reads_inconclusive_and_rescores_so(tmp_path: Path) -> None:
    """Through the real simulator: on the smoke load seglen and branching evict alike, request for request."""
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim", "arms=[branching,seglen]",
         "repeats=2", "checks.min_token_hit_rate=0", f"hydra.run.dir={run}"],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
    )
    assert proc.returncode == 1, proc.stderr  # inconclusive

    def timing_rows() -> list[dict[str, object]]:
        checks = json.loads((run / "bundle.json").read_text())["checks"]
        return [c for c in checks if c["check"] in ("ttft", "throughput")]

    assert {(c["status"], str(c["detail"]).startswith(UNEXERCISED)) for c in timing_rows()} == {("inconclusive", True)}
    assert rescore([str(run)]) == 1
    assert {(c["status"], str(c["detail"]).startswith(UNEXERCISED)) for c in timing_rows()} == {("inconclusive", True)}
