"""Every experiment composes against the typed schema and plans; typos fail at compose time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.errors import ConfigError
from hybridbench.plan.build import build_plan

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def load(*overrides: str) -> RunCfg:
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=list(overrides))
    obj = OmegaConf.to_object(cfg)
    assert isinstance(obj, RunCfg)
    return obj


def test_the_experiments_the_design_names_exist() -> None:
    assert {"smoke", "seglen", "radix", "branching", "l2", "survival", "prefill_overhead"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_each_experiment_composes_and_plans(name: str, tmp_path: Path) -> None:
    cfg = load(f"+experiment={name}")
    assert cfg.name == name
    plan = build_plan(cfg, tmp_path, {})
    assert len(plan.trials) == len(cfg.arms) * len(cfg.workloads) * cfg.repeats
    assert plan.baseline_arm in cfg.arms


def test_arms_alternate_across_repeats_and_seeds_are_stable(tmp_path: Path) -> None:
    cfg = load("+experiment=seglen", "repeats=2")
    plan = build_plan(cfg, tmp_path, {})
    arms_in_order = [t.arm for t in plan.trials]
    per_arm = len(cfg.workloads)
    expected_arms = [a for _ in range(2) for a in cfg.arms for _ in range(per_arm)]
    assert arms_in_order == expected_arms  # A A A B B B C C C, A A A B B B C C C: one server per arm and repeat
    assert [t.workload for t in plan.trials[:per_arm]] == list(cfg.workloads)
    assert [t.repeat for t in plan.trials].count(1) == len(plan.trials) // 2
    again = build_plan(load("+experiment=seglen", "repeats=2"), tmp_path, {})
    assert [w.seed for w in again.workloads] == [w.seed for w in plan.workloads]
    other = build_plan(load("+experiment=seglen", "repeats=2", "seed=7"), tmp_path, {})
    assert [w.seed for w in other.workloads] != [w.seed for w in plan.workloads]


def test_a_misspelt_key_fails_at_compose_time_with_the_key_named() -> None:
    with pytest.raises(ConfigCompositionException, match="max_concurency"):
        load("+experiment=smoke", "load.max_concurency=3")


def test_plan_refuses_a_baseline_that_is_not_an_arm(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="baseline_arm"):
        build_plan(load("+experiment=smoke", "checks.baseline_arm=seglen"), tmp_path, {})


def test_the_default_baseline_is_the_cache_off_arm_wherever_it_is_listed(tmp_path: Path) -> None:
    """With the first arm as the baseline, ``arms=[branching,disabled]`` compared nothing on timing (a cache-off arm
    is judged only against a cache-off baseline): ttft and throughput skipped, and the run passed on its hit rate."""
    assert build_plan(load("+experiment=smoke", "arms=[branching,disabled]"), tmp_path, {}).baseline_arm == "disabled"
    assert build_plan(load("+experiment=smoke", "arms=[lru,branching]"), tmp_path, {}).baseline_arm == "lru"
    chosen = load("+experiment=smoke", "arms=[branching,disabled]", "checks.baseline_arm=branching")
    assert build_plan(chosen, tmp_path, {}).baseline_arm == "branching"
    # Two cache-on arms before the cache-off one: each against no cache, or against each other? Said, not guessed.
    with pytest.raises(ConfigError, match=r"^checks\.baseline_arm: arms \['lru', 'branching', 'disabled'\] list "
                                          r"cache-off arm disabled after cache-on arms lru, branching; say which"):
        build_plan(load("+experiment=smoke", "arms=[lru,branching,disabled]"), tmp_path, {})
    both = load("+experiment=smoke", "arms=[lru,branching,disabled]", "checks.baseline_arm=lru")
    assert build_plan(both, tmp_path, {}).baseline_arm == "lru"
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim", "repeats=2",
                           "arms=[branching,disabled]", f"hydra.run.dir={run}"], capture_output=True, text=True,
                          timeout=300, check=False, cwd=ROOT)
    assert proc.returncode in (0, 1), proc.stderr
    bundle = json.loads((run / "bundle.json").read_text())
    timing = {c["check"]: c for c in bundle["checks"] if c["check"] in ("ttft", "throughput")}
    assert bundle["baseline_arm"] == "disabled" and set(timing) == {"ttft", "throughput"}, bundle["checks"]
    assert all(c["arm"] == "branching" and c["status"] != "skip" for c in timing.values()), timing
    # re-scored without the key, the run keeps the baseline it was planned with
    again = subprocess.run([sys.executable, "-m", "hybridbench.rescore", str(run)], capture_output=True, text=True,
                           timeout=300, check=False, cwd=ROOT)
    assert again.returncode == proc.returncode, again.stderr
    rescored = json.loads((run / "bundle.json").read_text())
    assert rescored["baseline_arm"] == "disabled" and rescored["checks"] == bundle["checks"]


def test_named_workloads_are_a_group_any_experiment_can_add_from_the_command_line(tmp_path: Path) -> None:
    cfg = load("+experiment=smoke", "+workload@workloads.chat=sharegpt", "workloads.chat.params.num_sessions=7")
    assert list(cfg.workloads) == ["gsp", "chat"]
    assert cfg.workloads["chat"].kind == "sharegpt" and cfg.workloads["chat"].params == {"num_sessions": 7}
    assert cfg.workloads["gsp"].params["system_prompt_len"] == 300  # smoke's own, from workload/smoke_gsp
    plan = build_plan(cfg, tmp_path, {})
    # smoke runs 2 repeats on the reference engine (conf/sizing/smoke/cpu.yaml)
    assert [w.name for w in plan.workloads] == ["gsp", "chat"] and len(plan.trials) == 2 * 2 * 2
    with pytest.raises(ConfigCompositionException, match="workload/nope"):
        load("+experiment=smoke", "+workload@workloads.x=nope")


def test_the_checks_group_sets_thresholds_and_the_experiment_still_picks_the_checks() -> None:
    default, strict = load("+experiment=prefill_overhead"), load("+experiment=prefill_overhead", "checks=strict")
    assert (default.checks.ttft_regression, strict.checks.ttft_regression) == (0.10, 0.05)
    assert strict.checks.bootstrap_samples == 4000
    assert strict.checks.enabled == default.checks.enabled == ["survival", "throughput", "prefill_overhead"]
    assert strict.checks.throughput_regression == 0.15  # the experiment's own setting wins over the group's
