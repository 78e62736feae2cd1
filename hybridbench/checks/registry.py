"""The one registry of check names."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from hybridbench.checks.accuracy import accuracy
from hybridbench.checks.base import Check, CheckInput, CheckResult
from hybridbench.checks.builtin import cache_hits, survival, throughput, ttft
from hybridbench.checks.correctness import kl, prefill_overhead
from hybridbench.checks.evictions import evictions, host_hits
from hybridbench.checks.marconi import marconi_trends
from hybridbench.checks.subjects import SUGGESTED_ARMS, nothing_to_judge
from hybridbench.config.schema import ChecksCfg, WorkloadCfg
from hybridbench.errors import ConfigError
from hybridbench.records.kl import KL_VARIANTS

__all__ = ["CHECKS", "run_checks", "validate_checks", "validate_judged_by", "validate_subjects"]

CHECKS: dict[str, Check] = {
    "survival": survival,
    "ttft": ttft,
    "throughput": throughput,
    "cache_hits": cache_hits,
    "kl": kl,
    "prefill_overhead": prefill_overhead,
    "evictions": evictions,
    "host_hits": host_hits,
    "accuracy": accuracy,
    "marconi_trends": marconi_trends,
}


def validate_checks(cfg: ChecksCfg) -> None:
    unknown = [n for n in cfg.enabled if n not in CHECKS]
    if unknown:
        raise ConfigError(f"checks.enabled: unknown check(s) {', '.join(unknown)}; choose from {', '.join(CHECKS)}")
    for key, names in (("enabled", cfg.enabled), ("kl_variants", cfg.kl_variants)):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:  # each would run, and be judged, twice: duplicate verdict rows, probes sent twice
            raise ConfigError(f"checks.{key}: {', '.join(twice)} listed more than once")
    bad = [v for v in cfg.kl_variants if v not in KL_VARIANTS]
    if bad:
        raise ConfigError(
            f"checks.kl_variants: unknown variant(s) {', '.join(bad)}; choose from {', '.join(KL_VARIANTS)}"
        )
    if "kl" in cfg.enabled and (cfg.kl_samples < 1 or cfg.kl_max_new_tokens < 1):
        raise ConfigError("checks.kl_samples and checks.kl_max_new_tokens must be >= 1 when the kl check is enabled")


def validate_judged_by(workloads: Mapping[str, WorkloadCfg]) -> None:
    """Each workload's ``judged_by`` names known checks, once each."""
    for name, w in workloads.items():
        unknown = [n for n in w.judged_by if n not in CHECKS]
        if unknown:
            raise ConfigError(f"workloads.{name}.judged_by: unknown check(s) {', '.join(unknown)}; "
                              f"choose from {', '.join(CHECKS)}")
        twice = sorted({n for n in w.judged_by if w.judged_by.count(n) > 1})
        if twice:
            raise ConfigError(f"workloads.{name}.judged_by: {', '.join(twice)} listed more than once")


def validate_subjects(enabled: Sequence[str], arms: Sequence[str], baseline: str, cache_off: Collection[str],
                      judged_by: Sequence[Sequence[str]] = (), *,
                      refusal: Callable[[str], str] | None = None) -> None:
    """ConfigError for the first enabled check the run's arms give nothing to judge (hybridbench.checks.subjects):
    said before a server starts, not as a verdict after every trial ran. ``judged_by``: each workload's
    ``judged_by`` (empty: every check); a check no workload is judged by is not asked anything, so not refused.
    ``refusal``: why the engine cannot run an arm ("" when it can): where it can run none of the arms the advice
    would add (an l2 arm on SGLang 0.5.9 with a hybrid model), the advice is to drop the check, with the reason."""
    for name in enabled:
        if judged_by and all(j and name not in j for j in judged_by):
            continue
        if why := nothing_to_judge(name, arms, baseline, cache_off):
            suggested = SUGGESTED_ARMS.get(name, ())
            refused = [r for a in suggested if (r := refusal(a))] if refusal is not None and suggested else []
            if suggested and len(refused) == len(suggested):
                reason = why.split(": add ", 1)[0]
                raise ConfigError(f"checks.enabled: {name} {reason}, nor can this engine run one ({refused[0]}): drop "
                                  f"{name} from checks.enabled (arms [{', '.join(arms)}])")
            raise ConfigError(f"checks.enabled: {name} {why}, or drop {name} from checks.enabled "
                              f"(arms [{', '.join(arms)}])")


def _no_nan_pass(result: CheckResult) -> CheckResult:
    """A pass computed from a NaN (an empty side, a zero baseline) compared false against its limit: it decided
    nothing, so it is inconclusive (exit 1), never a pass."""
    if result.status == "pass" and result.observed is not None and not math.isfinite(result.observed):
        return replace(result, status="inconclusive",
                       detail=f"{result.detail} (observed {result.observed}: not a number, not a pass)")
    return result


def _judged(name: str, inp: CheckInput) -> list[CheckResult]:
    """An enabled check that found nothing to judge says so in one row instead of vanishing from the verdicts:
    inconclusive where its arms gave it nothing (hybridbench.checks.subjects; a run is refused such a check at plan
    time, a re-scoring can still enable one on a run whose arms are fixed), else a skip."""
    rows = [_no_nan_pass(r) for r in CHECKS[name](inp)]
    if rows:
        return rows
    if why := nothing_to_judge(name, inp.arms, inp.baseline_arm, inp.cache_off):
        return [CheckResult(name, "-", "-", "inconclusive", None, "a subject in this run",
                            f"{name} found nothing in this run to judge: it {why}")]
    # e.g. a single arm's ttft (compared across runs, by hybridbench compare), the hit-rate floor at 0: said, not judged
    return [CheckResult(name, "-", "-", "skip", None, "a subject in this run",
                        f"{name} found nothing in this run to judge (no arm or workload it applies to)")]


def run_checks(names: list[str], inp: CheckInput) -> list[CheckResult]:
    return [r for name in names for r in _judged(name, inp)]
