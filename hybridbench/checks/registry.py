"""The one registry of check names."""

from __future__ import annotations

from hybridbench.checks.base import Check, CheckInput, CheckResult
from hybridbench.checks.builtin import cache_hits, survival, throughput, ttft
from hybridbench.checks.correctness import kl, prefill_overhead
from hybridbench.checks.evictions import evictions
from hybridbench.config.schema import ChecksCfg
from hybridbench.errors import ConfigError
from hybridbench.records.kl import KL_VARIANTS

__all__ = ["CHECKS", "run_checks", "validate_checks"]

CHECKS: dict[str, Check] = {
    "survival": survival,
    "ttft": ttft,
    "throughput": throughput,
    "cache_hits": cache_hits,
    "kl": kl,
    "prefill_overhead": prefill_overhead,
    "evictions": evictions,
}


def validate_checks(cfg: ChecksCfg) -> None:
    unknown = [n for n in cfg.enabled if n not in CHECKS]
    if unknown:
        raise ConfigError(f"checks.enabled: unknown check(s) {', '.join(unknown)}; choose from {', '.join(CHECKS)}")
    bad = [v for v in cfg.kl_variants if v not in KL_VARIANTS]
    if bad:
        raise ConfigError(
            f"checks.kl_variants: unknown variant(s) {', '.join(bad)}; choose from {', '.join(KL_VARIANTS)}"
        )
    if "kl" in cfg.enabled and (cfg.kl_samples < 1 or cfg.kl_max_new_tokens < 1):
        raise ConfigError("checks.kl_samples and checks.kl_max_new_tokens must be >= 1 when the kl check is enabled")


def run_checks(names: list[str], inp: CheckInput) -> list[CheckResult]:
    return [r for name in names for r in CHECKS[name](inp)]
