"""Every experiment composes against the typed schema and plans; typos fail at compose time."""

from __future__ import annotations

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

CONF = Path(__file__).resolve().parents[2] / "conf"
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
