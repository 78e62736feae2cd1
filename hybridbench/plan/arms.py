"""The experiment's arms, parsed once at plan time into frozen specs carrying their knobs.

``arms: [disabled, branching+seglen]`` and ``arm.*`` become one :class:`ArmSpec` per arm (vocabulary and
composition: ``reference_impl.engine.arms``). Which ``arm.*`` knob belongs to which part of an arm is decided
here, once: ``arm.<policy>.eff_weight`` is the eviction policy's weight, ``arm.l2.*`` the host tier's. Each
engine then maps a spec to its own flags through its table (``hybridbench.engines.arm_table``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from hybridbench.config.schema import ArmCfg
from hybridbench.errors import ConfigError
from reference_impl.engine.arms import (
    HICACHE_RATIO_MAX,
    HOST_TIER_GB_MAX,
    SEGLEN_EFF_WEIGHT_MAX,
    ArmKnobs,
    ArmSpec,
    L2Knobs,
    arm_spec,
)

__all__ = ["ArmSpec", "cache_off_arms", "check_arm_knobs", "default_baseline", "plan_arm", "plan_arms",
           "policy_only_arms", "saved_specs"]


def check_arm_knobs(arm: ArmCfg) -> None:
    """The arm knobs are numbers every engine passes on as is: refuse what no server would take."""
    for key, value in (("arm.seglen.eff_weight", arm.seglen.eff_weight), ("arm.marconi.eff_weight",
                       arm.marconi.eff_weight), ("arm.l2.hicache_ratio", arm.l2.hicache_ratio),
                       ("arm.l2.host_tier_gb", arm.l2.host_tier_gb)):
        if value is None and key == "arm.marconi.eff_weight":  # None: the server tunes it
            continue
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"{key}: expected a finite number >= 0, got {value!r}")
    if arm.l2.hicache_ratio <= 0:
        raise ConfigError(f"arm.l2.hicache_ratio must be > 0, got {arm.l2.hicache_ratio}")
    if arm.l2.hicache_ratio > HICACHE_RATIO_MAX:
        raise ConfigError(f"arm.l2.hicache_ratio must be at most {HICACHE_RATIO_MAX:g} (host pools as a multiple of "
                          f"the device pools), got {arm.l2.hicache_ratio:g}")
    if arm.l2.host_tier_gb > HOST_TIER_GB_MAX:
        raise ConfigError(f"arm.l2.host_tier_gb must be at most {HOST_TIER_GB_MAX:g} (GiB of host memory), "
                          f"got {arm.l2.host_tier_gb:g}")
    if arm.seglen.eff_weight > SEGLEN_EFF_WEIGHT_MAX:
        raise ConfigError(f"arm.seglen.eff_weight must be in [0, {SEGLEN_EFF_WEIGHT_MAX:g}] (the replay-length "
                          f"term's weight against recency, SGLang PR #22172), got {arm.seglen.eff_weight:g}")


def _knobs(spec: ArmSpec, cfg: ArmCfg) -> ArmKnobs:
    weights: dict[str, float | None] = {"seglen": cfg.seglen.eff_weight, "marconi": cfg.marconi.eff_weight}
    l2 = None
    if spec.host_tier:
        c = cfg.l2
        l2 = L2Knobs(hicache_ratio=c.hicache_ratio, hicache_write_policy=c.hicache_write_policy,
                     hicache_io_backend=c.hicache_io_backend, hicache_mem_layout=c.hicache_mem_layout,
                     host_tier_gb=c.host_tier_gb)
    return ArmKnobs(eff_weight=weights.get(spec.policy), l2=l2)


def plan_arm(name: str, knobs: ArmCfg | None = None) -> ArmSpec:
    """One arm name -> its frozen spec with the knobs that apply to it; ConfigError names the arm."""
    try:
        spec = arm_spec(name)
    except ValueError as exc:
        raise ConfigError(f"arms: {exc}") from None
    return ArmSpec(spec.name, spec.strategy, spec.policy, spec.host_tier, _knobs(spec, knobs or ArmCfg()))


def plan_arms(names: list[str], knobs: ArmCfg) -> tuple[ArmSpec, ...]:
    if not names:
        raise ConfigError("arms: the experiment lists no arms")
    if len(set(names)) != len(names):
        raise ConfigError(f"arms: duplicate arm in {names}")
    check_arm_knobs(knobs)
    specs = tuple(plan_arm(str(n), knobs) for n in names)
    if len({s.name for s in specs}) != len(specs):  # " lru" and "lru" are one arm
        raise ConfigError(f"arms: duplicate arm in {names}")
    return specs


def saved_specs(names: Sequence[str]) -> tuple[ArmSpec, ...]:
    """The specs of a saved plan's arm names (re-scoring reads arm names from plan.json); a name this version no
    longer knows is left out (it is then neither the cache-off baseline nor a policy-only candidate)."""
    specs = []
    for name in names:
        try:
            specs.append(replace(arm_spec(name), name=name))  # under the name its records carry
        except ValueError:
            continue
    return tuple(specs)


def cache_off_arms(names: tuple[str, ...]) -> frozenset[str]:
    """The arms of a saved plan whose spec has the cache off (re-scoring reads arm names from plan.json)."""
    return frozenset(s.name for s in saved_specs(names) if not s.cache_on)


def default_baseline(specs: Sequence[ArmSpec]) -> str:
    """The baseline arm when ``checks.baseline_arm`` is unset: the first arm, unless a cache-off arm comes after the
    only cache-on one (``arms=[branching,disabled]``): then that cache-off arm. A cache-off arm is compared only with
    a cache-off baseline (hybridbench.checks.builtin), so with branching as the baseline that run compared nothing
    on timing and passed. With several cache-on arms before a cache-off one the intent is ambiguous (each against no
    cache, or the cache-on arms against each other): ConfigError, naming the key to set."""
    if not specs:
        return ""
    on = [s.name for s in specs if s.cache_on]
    off = [s.name for s in specs if not s.cache_on]
    if not specs[0].cache_on or not off:
        return specs[0].name
    if len(on) == 1:
        return off[0]
    names = [s.name for s in specs]
    raise ConfigError(f"checks.baseline_arm: arms {names} list cache-off arm {off[0]} after cache-on arms "
                      f"{', '.join(on)}; say which is the baseline (checks.baseline_arm={off[0]} judges each "
                      f"against no cache, checks.baseline_arm={on[0]} compares the cache-on arms), or list "
                      f"{off[0]} first")


def policy_only_arms(specs: Sequence[ArmSpec], baseline: str) -> frozenset[str]:
    """The arms whose spec differs from the baseline arm's in its eviction policy (and that policy's weight) alone:
    same strategy, same host tier (seglen against branching). Their timing rows can only show what the policy changed
    (hybridbench.checks.builtin reads this set)."""
    base = next((s for s in specs if s.name == baseline), None)
    if base is None or not base.cache_on:
        return frozenset()
    return frozenset(
        s.name for s in specs
        if s.name != baseline and (s.policy, s.knobs.eff_weight) != (base.policy, base.knobs.eff_weight)
        and replace(s, name=base.name, policy=base.policy, knobs=replace(s.knobs, eff_weight=base.knobs.eff_weight))
        == base
    )
