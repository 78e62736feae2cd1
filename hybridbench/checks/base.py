"""What a check sees (records and summaries of a run) and what it returns (one verdict per subject)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hybridbench.config.schema import ChecksCfg
from hybridbench.metrics.decision import Judgement
from hybridbench.records.coverage import TrialOutcome
from hybridbench.records.kl import KlSample
from hybridbench.records.schema import Record

__all__ = ["Check", "CheckInput", "CheckResult", "Status", "judged_result", "run_verdict"]

# inconclusive: the check could not decide (e.g. a policy comparison in which nothing was evicted); never a pass.
Status = Literal["pass", "fail", "skip", "inconclusive"]


@dataclass(frozen=True, slots=True)
class CheckResult:
    check: str
    workload: str
    arm: str
    status: Status
    observed: float | None
    expected: str
    detail: str
    # An interval judgement's numbers (hybridbench.metrics.decision), None for a check without one: the change's
    # estimate and confidence interval, the tolerance's edge on the same scale, the smallest change the run could
    # have detected, and the repeats a decision would need at this spread.
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    limit: float | None = None
    mde: float | None = None
    repeats_needed: int | None = None


def _number(v: float) -> float | None:
    return v if math.isfinite(v) else None  # bundle.json holds numbers or null, never NaN


def judged_result(check: str, workload: str, arm: str, j: Judgement, *, observed: float | None, expected: str,
                  detail: str, offset: float = 0.0) -> CheckResult:
    """One row from a judgement; ``offset`` puts the numbers on the row's own scale (1.0: a ratio, not a change)."""
    return CheckResult(check, workload, arm, j.status, observed, expected, detail,
                       _number(j.estimate + offset), _number(j.low + offset), _number(j.high + offset),
                       _number(j.limit + offset), _number(j.mde), j.repeats_needed)


@dataclass(frozen=True, slots=True)
class CheckInput:
    cfg: ChecksCfg
    arms: tuple[str, ...]
    baseline_arm: str
    workloads: tuple[str, ...]
    records: dict[tuple[str, str], list[Record]]  # (workload, arm) -> records of every repeat
    trial_summaries: dict[tuple[str, str], list[dict[str, Any]]]  # (workload, arm) -> one per repeat
    snapshots: dict[tuple[str, str], list[dict[str, Any]]]
    seed: int
    kl_samples: dict[tuple[str, str], list[KlSample]] = field(default_factory=dict)  # (workload, arm) -> samples
    kl_threshold: float = 0.003  # the engine's (EngineCfg.kl_threshold)
    # (workload, arm) -> every planned trial: whether it ran, and how many requests it was to send
    trials: dict[tuple[str, str], list[TrialOutcome]] = field(default_factory=dict)
    # The arms whose spec has the cache off (RunPlan.arm_specs); the checks never read it from an arm's name.
    cache_off: frozenset[str] = frozenset()
    # The candidate arms whose spec differs from the baseline's in the eviction policy alone (seglen against
    # branching: hybridbench.plan.arms.policy_only_arms); on a modelled clock their timing rows pass only where the
    # policy changed some request's hits.
    policy_only: frozenset[str] = frozenset()
    # probe name -> its saved samples (hybridbench/probes/<name>.py's sample type), for the check that reads them
    samples: dict[str, list[Any]] = field(default_factory=dict)
    # Which clock the timing checks judge: "wall" (the client's), or "modelled" (the reference server's cost model:
    # EngineCfg.timing; the summaries' modelled_* keys). Never modelled on a GPU engine.
    timing: str = "wall"


Check = Callable[[CheckInput], Sequence[CheckResult]]


def run_verdict(statuses: Iterable[Status]) -> Literal["pass", "fail", "inconclusive"]:
    """A run's (or a comparison's) verdict from its checks' statuses. ``pass`` needs positive evidence: a run whose
    every check was skipped (one repeat for a throughput verdict, no samples, no request completed) or that ran no
    check at all decided nothing, so it is ``inconclusive`` (exit 1), never a pass."""
    seen = set(statuses)
    if "fail" in seen:
        return "fail"
    return "pass" if "pass" in seen and "inconclusive" not in seen else "inconclusive"
