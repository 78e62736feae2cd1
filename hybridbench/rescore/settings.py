"""The settings a re-scoring uses: the run's own (plan.json's resolved config) with the overrides applied.

Only what scoring reads may change — ``checks.*`` (thresholds, which checks run, the baseline arm) and
``engine.kl_threshold``. Anything else (load, workloads, arms, seeds, the kl probe's ``checks.kl_samples``,
``kl_variants``, ``kl_max_new_tokens``, ``kl_temperature``, the accuracy probe's ``checks.accuracy_python``,
``_datasets``, ``_limit``, ``_max_tokens``, ``_batch_size``, ``_timeout_s``, ``_mode``) decided what was sent and
measured, so
changing it needs a new run: such an override is refused with the key named (exit 2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hybridbench.checks.registry import validate_checks
from hybridbench.config.schema import MODELLED_TIMING_ENGINES, TIMINGS, ChecksCfg, EngineCfg, RunCfg
from hybridbench.config.scoring_keys import RESCORABLE, is_probe_setting
from hybridbench.config.validate import validate_config
from hybridbench.errors import ConfigError
from hybridbench.plan.repeats import saved_look_checks
from hybridbench.results import SavedPlan
from hybridbench.results.score import ScoreSettings, judged_by_of

__all__ = ["effective_settings", "parse_overrides"]


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` arguments (Hydra's syntax: ``checks.enabled=[ttft,survival]``) as a nested dict."""
    for item in items:
        key = item.split("=", 1)[0]
        if "=" not in item or not key:
            raise ConfigError(f"override {item!r}: expected key=value, e.g. checks.ttft_regression=0.05")
        if not (key.startswith(RESCORABLE[0]) or key in RESCORABLE[1:]) or is_probe_setting(key):
            raise ConfigError(f"override {key}: a re-scoring changes only checks.* (but the probes' settings), "
                              f"engine.kl_threshold and engine.timing; {key} decided what the run measured, so it "
                              "needs a new run")
    try:
        parsed = OmegaConf.to_container(OmegaConf.from_dotlist(list(items)))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"overrides: {str(exc).splitlines()[0]}") from None
    except yaml.YAMLError as exc:  # a value YAML cannot read (an unclosed [ or {): a typo, not a traceback
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"overrides: a value is not YAML ({problem}): {' '.join(items)}") from None
    assert isinstance(parsed, dict)
    return {str(k): v for k, v in parsed.items()}


def _checks(saved: object, overrides: Mapping[str, Any]) -> ChecksCfg:
    known = {f.name for f in fields(ChecksCfg)}
    # An older run may carry keys a later hybridbench dropped: they no longer mean anything to a check.
    kept = {k: v for k, v in saved.items() if k in known} if isinstance(saved, Mapping) else {}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"override checks.{unknown[0]}: no such key; checks has {', '.join(sorted(known))}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(ChecksCfg), kept, dict(overrides))
        out = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or "checks"
        raise ConfigError(f"checks.{key}: {str(exc).splitlines()[0]}" if key != "checks"
                          else f"checks: {str(exc).splitlines()[0]}") from None
    assert isinstance(out, ChecksCfg)
    return out


def _validate(checks: ChecksCfg, kl: float) -> None:
    validate_checks(checks)
    validate_config(RunCfg(checks=checks, engine=EngineCfg(kl_threshold=kl)))


def effective_settings(plan: SavedPlan, overrides: Mapping[str, Any]) -> tuple[ScoreSettings, str]:
    """The run's scoring settings with ``overrides`` applied, validated as a run's would be; and the baseline arm."""
    config = plan.config
    checks = _checks(config.get("checks"), overrides.get("checks") or {})
    engine_saved = config.get("engine")
    saved_kl = EngineCfg().kl_threshold
    if isinstance(engine_saved, Mapping) and isinstance(engine_saved.get("kl_threshold"), (int, float)):
        saved_kl = float(engine_saved["kl_threshold"])
    kl = saved_kl
    engine_over = overrides.get("engine") or {}
    if "kl_threshold" in engine_over:
        value = engine_over["kl_threshold"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"engine.kl_threshold: expected a number, got {value!r}")
        kl = float(value)
    try:
        _validate(checks, kl)
    except ConfigError as exc:
        # The saved value itself may break a rule a later hybridbench added (checks.confidence above 0.99): said so,
        # not worded as if the user had overridden it.
        try:
            _validate(_checks(config.get("checks"), {}), saved_kl)
        except ConfigError as saved:
            if str(saved) == str(exc):
                raise ConfigError(f"{exc} (the value the run was saved with; override the key to re-score it)"
                                  ) from None
        raise
    ran = 1 + max((t.repeat for t in plan.trials), default=0)
    checks = saved_look_checks(config, checks, ran)  # an adaptive run's level at its last look (plan.repeats)
    baseline = checks.baseline_arm or plan.baseline_arm  # unset: the one the run was planned with
    if baseline not in plan.arms:
        raise ConfigError(f"checks.baseline_arm: {baseline!r} is not one of the run's arms {list(plan.arms)}")
    seed = config.get("seed", 0)
    workloads = config.get("workloads")
    judged = judged_by_of(workloads) if isinstance(workloads, Mapping) else {}
    return ScoreSettings(checks, seed if isinstance(seed, int) else 0, kl, _timing(engine_saved, engine_over),
                         judged), baseline


def _timing(saved: object, overrides: Mapping[str, Any]) -> str:
    """The clock the timing checks judge: the run's (wall before the key existed), or the override's — which only
    a run whose records carry the reference server's modelled times can be judged on (the check says so)."""
    engine = saved if isinstance(saved, Mapping) else {}
    value = overrides.get("timing", engine.get("timing", "wall"))
    if value not in TIMINGS:
        raise ConfigError(f"engine.timing: expected one of {', '.join(TIMINGS)}, got {value!r}")
    if value == "modelled" and engine.get("name") not in MODELLED_TIMING_ENGINES:
        raise ConfigError(f"engine.timing=modelled: engine {engine.get('name')!r} reports no modelled time "
                          f"(only {', '.join(MODELLED_TIMING_ENGINES)}); a GPU engine is judged on wall time")
    return str(value)
