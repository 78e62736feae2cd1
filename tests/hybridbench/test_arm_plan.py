"""Arms are parsed once, at plan time, into frozen specs with their knobs; each engine's table decides what it can
express, and refuses the rest at plan time naming the arm."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from hybridbench.config.schema import ArmCfg, L2ArmCfg, MarconiArmCfg, RunCfg, SeglenArmCfg, WorkloadCfg
from hybridbench.engines.reference_cmd import REFERENCE_ARMS
from hybridbench.engines.sglang_cmd import SGLANG_ARMS
from hybridbench.engines.sim import SIM_ARMS
from hybridbench.engines.tokenspeed_cmd import TOKENSPEED_ARMS
from hybridbench.engines.vllm_cmd import VLLM_ARMS
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm
from hybridbench.plan.build import build_plan


def test_the_plan_holds_one_frozen_spec_per_arm_with_the_knobs_that_apply(tmp_path: Path) -> None:
    knobs = ArmCfg(seglen=SeglenArmCfg(eff_weight=0.4), marconi=MarconiArmCfg(eff_weight=0.7),
                   l2=L2ArmCfg(hicache_ratio=3.0, host_tier_gb=8.0))
    cfg = RunCfg(arms=["disabled", "branching+seglen", "marconi+l2", " lru"], arm=knobs,
                 workloads={"w": WorkloadCfg()})
    plan = build_plan(cfg, tmp_path, {})
    assert plan.arms == ("disabled", "branching+seglen", "marconi+l2", "lru")
    off, seglen, marconi, lru = (plan.arm(a) for a in plan.arms)
    assert not off.cache_on and seglen.cache_on
    assert (seglen.strategy, seglen.policy, seglen.knobs.eff_weight, seglen.knobs.l2) == ("extra_buffer", "seglen",
                                                                                           0.4, None)
    assert (marconi.policy, marconi.host_tier, marconi.knobs.eff_weight) == ("marconi", True, 0.7)
    assert marconi.knobs.l2 is not None and (marconi.knobs.l2.hicache_ratio, marconi.knobs.l2.host_tier_gb) == (3.0,
                                                                                                                 8.0)
    assert (lru.strategy, lru.knobs.eff_weight) == ("no_buffer", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lru.strategy = "disabled"  # type: ignore[misc]
    saved = plan.to_json()["arm_specs"]
    assert [s["name"] for s in saved] == list(plan.arms) and saved[1]["knobs"]["eff_weight"] == 0.4
    json.dumps(saved)  # plan.json can carry them


@pytest.mark.parametrize(("arms", "message"), [
    (["lru", "fifo"], "arms: unknown arm 'fifo'"),
    (["lru", "disabled+l2"], "arm 'disabled' does not compose"),
    (["seglen+marconi"], "seglen and marconi are both eviction policies"),
    (["lru", "lru "], "duplicate arm"),
    (["disabled", "lru+"], r"arm 'lru\+': an empty part between '\+' signs"),  # was taken as lru
    (["disabled", "+l2"], r"arm '\+l2': an empty part"),
])
def test_bad_arm_names_fail_when_the_plan_is_built(tmp_path: Path, arms: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        build_plan(RunCfg(arms=arms, workloads={"w": WorkloadCfg()}), tmp_path, {})
    assert e.value.exit_code == 2


@pytest.mark.parametrize(("table", "arm", "message"), [
    (VLLM_ARMS, "branching+seglen", "arm branching+seglen needs the seglen eviction policy, which vLLM does not"),
    (VLLM_ARMS, "marconi+l2", "arm marconi+l2 needs the marconi eviction policy"),
    (REFERENCE_ARMS, "marconi", "engine reference: arm 'marconi' cannot run on this engine"),
    (SIM_ARMS, "lru+marconi", "engine sim: arm 'marconi' cannot run on this engine"),
    (VLLM_ARMS, "lazy", "arm lazy is SGLang's extra_buffer_lazy (one ping-pong state slot a request), which vLLM has "
                        "no counterpart of"),
    (TOKENSPEED_ARMS, "lazy+l2", "arm lazy+l2 is SGLang's extra_buffer_lazy"),
])
def test_each_engine_table_refuses_what_it_cannot_express(table: object, arm: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        table.check(plan_arm(arm))  # type: ignore[attr-defined]


def test_every_table_expresses_the_vocabulary_it_claims() -> None:
    for name in ("disabled", "lru", "branching", "seglen", "l2", "branching+seglen+l2"):
        for table in (SGLANG_ARMS, REFERENCE_ARMS, SIM_ARMS):
            table.check(plan_arm(name))  # type: ignore[attr-defined]
    SGLANG_ARMS.check(plan_arm("marconi+l2"))
    for name in ("lazy", "lazy+seglen", "branching+lazy+l2"):
        for table in (SGLANG_ARMS, REFERENCE_ARMS, SIM_ARMS):
            table.check(plan_arm(name))  # type: ignore[attr-defined]
    for name in ("disabled", "lru", "branching", "l2"):
        VLLM_ARMS.check(plan_arm(name))


@pytest.mark.parametrize(("name", "strategy", "policy"), [
    ("lazy", "extra_buffer_lazy", "lru"), ("lazy+seglen", "extra_buffer_lazy", "seglen"),
    ("branching+lazy", "extra_buffer_lazy", "lru"), ("lru+lazy", "extra_buffer_lazy", "lru"),
    ("branching+lru", "extra_buffer", "lru"),
])
def test_lazy_composes_into_the_lazy_strategy(name: str, strategy: str, policy: str) -> None:
    spec = plan_arm(name)
    assert (spec.strategy, spec.policy, spec.extra_buffer) == (strategy, policy, True)


def test_sglang_refuses_lazy_without_the_overlap_schedule_at_plan_time() -> None:
    # SGLang asserts it while sizing the pools, after the weights load: an hour of GPU time later.
    from hybridbench.config.schema import EngineCfg
    from hybridbench.engines.sglang_cmd import _Ctx

    ctx = _Ctx(engine=EngineCfg(extra_args=["--disable-overlap-schedule"]), help=None)
    with pytest.raises(ConfigError, match=re.escape("arm lazy (extra_buffer_lazy) requires the overlap schedule")):
        SGLANG_ARMS.express(plan_arm("lazy"), ctx)
    flags = SGLANG_ARMS.express(plan_arm("branching"), ctx)  # extra_buffer runs without it (one ping-pong slot)
    assert [f.value for f in flags if f.name == "--mamba-radix-cache-strategy"] == ["extra_buffer"]
