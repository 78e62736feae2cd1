"""The one registry of check names."""

from __future__ import annotations

from hybridbench.checks.base import Check, CheckInput, CheckResult
from hybridbench.checks.builtin import cache_hits, survival, throughput, ttft
from hybridbench.errors import ConfigError

__all__ = ["CHECKS", "run_checks", "validate_checks"]

CHECKS: dict[str, Check] = {
    "survival": survival,
    "ttft": ttft,
    "throughput": throughput,
    "cache_hits": cache_hits,
}


def validate_checks(names: list[str]) -> None:
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ConfigError(f"checks.enabled: unknown check(s) {', '.join(unknown)}; choose from {', '.join(CHECKS)}")


def run_checks(names: list[str], inp: CheckInput) -> list[CheckResult]:
    return [r for name in names for r in CHECKS[name](inp)]
