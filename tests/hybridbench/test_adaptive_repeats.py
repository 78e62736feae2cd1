"""Adaptive repeats: the stopping rule, the per-look level, and the runner's loop end to end on the sim engine.

The loop tests run the whole harness in-process (config -> plan -> sim engine -> records -> checks -> bundle) on a
tiny load; a run whose timing rows stay open is made with a throwaway ``ttft`` plug-in that never decides, the
way test_plugins.py plugs in a check, so the loop's bounds are tested whatever the three-outcome rule says.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hybridbench.app import run
from hybridbench.checks import registry as checks
from hybridbench.checks.base import CheckInput, CheckResult
from hybridbench.config.schema import ChecksCfg, RunCfg, WorkloadCfg
from hybridbench.config.store import register
from hybridbench.config.validate import validate_config
from hybridbench.errors import ConfigError
from hybridbench.metrics.stats import paired_relative_change, t_quantile
from hybridbench.plan.build import build_plan
from hybridbench.plan.repeats import RepeatPolicy, extend_plan, repeat_policy, stop_reason
from hybridbench.records.coverage import TrialOutcome
from hybridbench.records.schema import Record
from hybridbench.rescore.run import rescore_run
from hybridbench.results.score import ScoreSettings, score_trials

CONF = Path(__file__).resolve().parents[2] / "conf"


def _row(check: str, status: str) -> CheckResult:
    return CheckResult(check, "w", "lru", status, 0.0, "limit", "detail")  # type: ignore[arg-type]


POLICY = RepeatPolicy(minimum=3, maximum=6, budget_s=600.0, confidence=0.95)


def test_nothing_is_looked_at_before_the_minimum() -> None:
    assert stop_reason(POLICY, [_row("ttft", "pass")], [1.0, 1.0]) is None


def test_every_timing_row_decided_stops_at_the_minimum() -> None:
    rows = [_row("ttft", "pass"), _row("throughput", "fail"), _row("prefill_overhead", "pass"),
            _row("cache_hits", "inconclusive")]  # not a timing row: more repeats would not decide it
    assert stop_reason(POLICY, rows, [1.0] * 3) == "decided"


@pytest.mark.parametrize("check", ["ttft", "throughput", "prefill_overhead"])
def test_an_undecided_timing_row_earns_a_repeat_until_repeats_max(check: str) -> None:
    rows = [_row("ttft", "pass"), _row(check, "inconclusive")]
    assert stop_reason(POLICY, rows, [1.0] * 3) is None
    assert stop_reason(POLICY, rows, [1.0] * 5) is None
    assert stop_reason(POLICY, rows, [1.0] * 6) == "repeats_max"


def test_a_row_with_a_repeat_that_has_no_figure_earns_no_repeat() -> None:
    # That repeat stays unmeasured whatever follows: the row cannot decide, and extra repeats ran to repeats_max
    # (or the budget) for nothing.
    from hybridbench.checks.builtin import throughput

    sums = {("w", "lru"): [{"request_throughput": v} for v in (10.0, 20.0, 40.0)],
            ("w", "seglen"): [{"request_throughput": v} for v in (9.5, math.nan, 38.5)]}
    inp = CheckInput(ChecksCfg(), ("lru", "seglen"), "lru", ("w",), {}, sums, {}, 0, cache_off=frozenset())
    (row,) = throughput(inp)
    assert row.status == "inconclusive", row
    assert stop_reason(POLICY, [row], [1.0] * 3) == "decided"


def test_the_budget_stops_when_one_more_repeat_as_long_as_the_longest_would_pass_it() -> None:
    rows = [_row("ttft", "inconclusive")]
    policy = RepeatPolicy(minimum=3, maximum=10, budget_s=100.0, confidence=0.95)
    assert stop_reason(policy, rows, [20.0, 20.0, 20.0]) is None  # 60 s + 20 s fits 100 s
    assert stop_reason(policy, rows, [20.0, 20.0, 20.0, 20.0]) is None  # 80 + 20 = 100: still fits
    assert stop_reason(policy, rows, [20.0, 20.0, 20.0, 21.0]) == "budget"  # 81 + 21 > 100
    assert stop_reason(policy, rows, [10.0, 10.0, 45.0]) == "budget"  # the longest repeat, not the mean


def test_the_per_look_levels_spend_half_the_error_at_the_last_look_and_half_before() -> None:
    assert RepeatPolicy(3, 3, 60.0, 0.95).look_confidence(1) == pytest.approx(0.95)  # a fixed count: one look
    policy = RepeatPolicy(3, 6, 60.0, 0.95)
    assert policy.looks == 4
    assert [policy.look(n) for n in (1, 3, 4, 6)] == [1, 1, 2, 4]
    levels = [policy.look_confidence(k) for k in range(1, 5)]
    assert levels == pytest.approx([1 - 0.025 / 3] * 3 + [0.975])
    assert sum(1 - c for c in levels) == pytest.approx(0.05)  # the shares add up to the nominal error
    two = RepeatPolicy(2, 3, 60.0, 0.90)
    assert [two.look_confidence(1), two.look_confidence(2)] == pytest.approx([0.95, 0.95])
    cfg = RunCfg(repeats=3, repeats_max=0)
    assert repeat_policy(cfg).maximum == 3  # 0 = repeats


def _summaries_run(base_ms: Sequence[float], cand_ms: Sequence[float], checks_cfg: ChecksCfg) -> list[CheckResult]:
    """A two-arm run with these per-repeat mean TTFTs (one request per trial), scored by the real check code."""
    outcomes, records = [], {}
    for repeat, pair in enumerate(zip(base_ms, cand_ms, strict=True)):
        for arm, ttft in zip(("disabled", "lru"), pair, strict=True):
            tid = f"{repeat}-w-{arm}"
            outcomes.append(TrialOutcome(tid, "w", arm, repeat, "ran", 1))
            records[tid] = [Record(run_id="r", trial_id=tid, arm=arm, workload="w", repeat=repeat, request_index=0,
                                   session_id="s", turn_id=0, scheduled_s=0.0, sent_s=0.0,
                                   first_token_s=ttft / 1000, end_s=ttft / 500, prompt_tokens=8, output_tokens=1,
                                   cached_tokens=0, status="ok")]
    scored = score_trials(outcomes, records, {}, [], arms=("disabled", "lru"), baseline_arm="disabled",
                          workloads=("w",), settings=ScoreSettings(checks_cfg, 0, 1e-3))
    return [c for c in scored.checks if c.check == "ttft"]


def test_the_checks_at_a_look_use_the_per_look_level() -> None:
    base = [100.0, 100.0, 100.0, 100.0]
    cand = [95.0, 101.0, 98.0, 103.0]
    policy = RepeatPolicy(minimum=2, maximum=9, budget_s=600.0, confidence=0.95)
    nominal = _summaries_run(base, cand, ChecksCfg(enabled=["ttft"]))[0]
    looked = _summaries_run(base, cand, policy.checks_at_look(ChecksCfg(enabled=["ttft"]), policy.look(4)))[0]
    ratios = [c / b - 1 for b, c in zip(base, cand, strict=True)]
    sd = statistics.stdev(ratios) / math.sqrt(len(ratios))
    # Look 3 of 8: the paired t-interval at 1 - 0.025/7 (t at 99.82%, 3 df = 9.0), not at 95% (3.18).
    wide = paired_relative_change(base, cand, confidence=policy.look_confidence(3))
    assert wide.high - wide.low == pytest.approx(2 * t_quantile(1 - 0.025 / 14, 3) * sd)
    assert f"CI {wide.low:+.1%} .. {wide.high:+.1%}" in looked.detail
    narrow = paired_relative_change(base, cand, confidence=0.95)
    assert f"CI {narrow.low:+.1%} .. {narrow.high:+.1%}" in nominal.detail
    assert (wide.high - wide.low) > 2 * (narrow.high - narrow.low)


def test_keys_are_validated_up_front() -> None:
    with pytest.raises(ConfigError, match=r"^repeats_max must be >= repeats \(3\)"):
        validate_config(RunCfg(repeats=3, repeats_max=2))
    with pytest.raises(ConfigError, match=r"^budget_minutes must be a finite number > 0, got 0"):
        validate_config(RunCfg(budget_minutes=0.0))
    with pytest.raises(ConfigError, match=r"^repeats_max must be a finite number >= 0"):
        validate_config(RunCfg(repeats_max=-1))
    with pytest.raises(ConfigError, match=r"^repeats_max: 6000 repeats x 2 arm"):
        validate_config(RunCfg(repeats=1, repeats_max=6000, workloads={"w": WorkloadCfg()}))
    validate_config(RunCfg(repeats=3, repeats_max=3, budget_minutes=0.5))


def test_an_earned_repeat_is_planned_as_build_plan_would_have(tmp_path: Path) -> None:
    cfg = RunCfg(repeats=2, workloads={"a": WorkloadCfg(), "b": WorkloadCfg()})
    grown = extend_plan(build_plan(cfg, tmp_path, {}), 2, cfg.seed)
    cfg.repeats = 3
    whole = build_plan(cfg, tmp_path, {})
    assert grown.trials == whole.trials


# --- the runner's loop, end to end on the sim engine ---

def _cfg(*overrides: str) -> RunCfg:
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=[
            "+experiment=smoke", "engine=sim", "checks.enabled=[survival,ttft,throughput]",
            "workloads.gsp.params.num_groups=2", "workloads.gsp.params.prompts_per_group=2", *overrides])
    run_cfg = OmegaConf.to_object(cfg)
    assert isinstance(run_cfg, RunCfg)
    return run_cfg


def _never_decides(inp: CheckInput) -> list[CheckResult]:
    n = len(inp.trial_summaries.get((inp.workloads[0], inp.baseline_arm), []))
    return [CheckResult("ttft", inp.workloads[0], "branching", "inconclusive", None, "limit",
                        f"{n} repeats at confidence {inp.cfg.confidence:.6f}")]


def _bundle(run_dir: Path) -> dict[str, object]:
    return dict(json.loads((run_dir / "bundle.json").read_text()))


def test_a_run_whose_rows_decide_stops_at_repeats(tmp_path: Path) -> None:
    cfg = _cfg("repeats=2", "repeats_max=5")
    code = run(cfg, tmp_path, asdict(cfg))
    bundle = _bundle(tmp_path)
    rep = bundle["repeats"]
    assert isinstance(rep, dict)
    assert (rep["ran"], rep["stopped"], rep["looks"]) == (2, "decided", 1)
    assert rep["confidence_at_stop"] == pytest.approx(1 - 0.025 / 3)  # look 1 of 4
    assert {t["repeat"] for t in json.loads((tmp_path / "plan.json").read_text())["trials"]} == {0, 1}
    assert "**Repeats**: 2 ran (bounds 2..5" in (tmp_path / "report.md").read_text()
    assert code == (0 if bundle["verdict"] == "pass" else 1)


def test_a_run_that_stays_undecided_stops_at_repeats_max(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(checks.CHECKS, "ttft", _never_decides)
    cfg = _cfg("repeats=2", "repeats_max=4")
    assert run(cfg, tmp_path, asdict(cfg)) == 1
    rep = _bundle(tmp_path)["repeats"]
    assert isinstance(rep, dict)
    assert (rep["ran"], rep["stopped"], rep["looks"]) == (4, "repeats_max", 3)
    assert rep["undecided"] == ["ttft gsp branching"]
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert [t["repeat"] for t in plan["trials"]] == [0, 0, 1, 1, 2, 2, 3, 3]  # arms interleaved in each repeat
    trials = _bundle(tmp_path)["trials"]
    assert isinstance(trials, list) and len(trials) == 8 and all(t["state"] == "ran" for t in trials)
    ttft = [c for c in _bundle(tmp_path)["checks"] if c["check"] == "ttft"]  # type: ignore[attr-defined]
    # The final verdict is scored over all four repeats at the last look's level (1 - 0.05/2).
    assert ttft[0]["detail"] == f"4 repeats at confidence {0.975:.6f}"
    # Re-scored from the saved files, the run is judged at the level it ran at, not the nominal one.
    again = [c for c in rescore_run(tmp_path)["checks"] if c["check"] == "ttft"]
    assert again[0]["detail"] == ttft[0]["detail"]


def test_a_run_stops_when_one_more_repeat_would_pass_the_budget(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(checks.CHECKS, "ttft", _never_decides)
    # A budget smaller than any repeat: the minimum still runs in full, then nothing more is earned.
    assert run(_cfg("repeats=2", "repeats_max=10", "budget_minutes=1e-6"), tmp_path, {}) == 1
    rep = _bundle(tmp_path)["repeats"]
    assert isinstance(rep, dict)
    assert (rep["ran"], rep["stopped"]) == (2, "budget")
    ttft = [c for c in _bundle(tmp_path)["checks"] if c["check"] == "ttft"]  # type: ignore[attr-defined]
    assert ttft[0]["detail"] == f"2 repeats at confidence {1 - 0.025 / 8:.6f}"  # stopped at look 1 of 9
    assert len(rep["repeat_seconds"]) == 2 and all(s > 0 for s in rep["repeat_seconds"])


@pytest.mark.parametrize(("override", "line"), [
    ("repeats_max=2", "repeats_max must be >= repeats (3) or 0 (= repeats), got 2"),
    ("budget_minutes=-1", "budget_minutes must be a finite number > 0, got -1"),
])
def test_a_bad_bound_is_one_line_and_exit_2(tmp_path: Path, override: str, line: str) -> None:
    argv = ["+experiment=smoke", "engine=sim", "repeats=3", override, f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.run([sys.executable, "-m", "hybridbench", *argv], capture_output=True, text=True, timeout=300,
                          check=False, cwd=CONF.parent)
    assert proc.returncode == 2
    assert line in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "run" / "plan.json").exists()
