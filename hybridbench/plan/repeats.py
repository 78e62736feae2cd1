"""Adaptive repeats: how many repeats a run does, and the confidence its timing checks use at each look.

``repeats`` is the minimum. After each full repeat from there on (a *look*), the run's timing checks are scored
over the records so far by the same code as the final verdict; while a timing row is ``inconclusive`` the run
earns one more repeat, until every such row decides (``decided``), ``repeats_max`` is reached (``repeats_max``),
or one more repeat, as long as the longest so far, would pass ``budget_minutes`` (``budget``).

Error control: every look may stop the run on a decision, so each look is a chance of a false pass (or a false
fail). The nominal error ``1 - confidence`` is spent over the K = repeats_max - repeats + 1 possible looks: half at
the last look, the other half split evenly over the earlier ones, and each look's intervals are at the confidence
its share leaves. The shares add up to the nominal error, so by the union bound the chance of any false decision
over all looks stays within it whatever the correlation between looks (exact group-sequential boundaries, Pocock's
or O'Brien-Fleming's, assume normal statistics of known variance — not t-intervals over 2 to 9 repeats). Keeping
half for the last look keeps most of a fixed-count test's power on a noisy machine; the earlier looks still stop
a clear result early. A fixed count (repeats_max = repeats) has one look, at the nominal level.
docs/guides/adaptive-repeats.md says why, with simulations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from hybridbench.checks.base import CheckResult
from hybridbench.checks.builtin import UNEXERCISED, UNPAIRED
from hybridbench.config.schema import ChecksCfg, RunCfg
from hybridbench.plan.build import repeat_trials
from hybridbench.plan.types import RunPlan

__all__ = ["TIMING_CHECKS", "RepeatPolicy", "StopReason", "extend_plan", "look_line", "repeat_policy",
           "repeats_entry", "saved_look_checks", "stop_reason", "undecided"]

# The regression judgements that rest on timing, whose intervals narrow as repeats are added.
TIMING_CHECKS = frozenset({"ttft", "throughput", "prefill_overhead"})
StopReason = Literal["decided", "repeats_max", "budget"]


@dataclass(frozen=True, slots=True)
class RepeatPolicy:
    minimum: int  # repeats
    maximum: int  # repeats_max (>= minimum)
    budget_s: float  # budget_minutes in seconds: bounds the repeats' own time, earned repeats included
    confidence: float  # checks.confidence: the nominal level over all looks together

    @property
    def looks(self) -> int:
        """How many times the run may stop to look: after repeat ``minimum``, ``minimum + 1``, ... ``maximum``."""
        return self.maximum - self.minimum + 1

    def look_confidence(self, look: int) -> float:
        """The confidence of every interval at look ``look`` (1: after repeat ``minimum``; the final verdict is
        scored at the level of the look the run stopped at): half the nominal error for the last look, half
        split over the earlier ones."""
        alpha = 1 - self.confidence
        if self.looks == 1:
            return self.confidence
        return 1 - alpha / 2 if look >= self.looks else 1 - alpha / 2 / (self.looks - 1)

    def checks_at_look(self, checks: ChecksCfg, look: int) -> ChecksCfg:
        """The checks' settings at look ``look``: what the run scores with there."""
        return replace(checks, confidence=self.look_confidence(look))

    def look(self, done: int) -> int:
        """Which look follows ``done`` full repeats (a run cut short before its minimum: the first)."""
        return max(done - self.minimum + 1, 1)


def saved_look_checks(config: Mapping[str, Any], checks: ChecksCfg, ran: int) -> ChecksCfg:
    """``checks`` at the level of the last look of the run whose resolved config (plan.json's) is ``config`` and
    which ran ``ran`` repeats: a re-scoring judges at the level the run did, or a row inconclusive at its look
    could pass at the nominal level."""
    repeats, most = config.get("repeats"), config.get("repeats_max")
    if not isinstance(repeats, int) or not isinstance(most, int) or most <= repeats:
        return checks  # a fixed count (or a run saved before adaptive repeats): one look, the nominal level
    policy = RepeatPolicy(repeats, most, 0.0, checks.confidence)
    return policy.checks_at_look(checks, policy.look(ran))


def repeat_policy(cfg: RunCfg) -> RepeatPolicy:
    return RepeatPolicy(cfg.repeats, max(cfg.repeats, cfg.repeats_max), cfg.budget_minutes * 60.0,
                        cfg.checks.confidence)


def undecided(rows: Iterable[CheckResult]) -> list[CheckResult]:
    """The timing rows that did not decide: more repeats could narrow their intervals (not a policy comparison whose
    hits were identical request for request in every repeat so far: a tighter interval is not what it lacks; nor a
    row with a repeat that has no figure: it stays unmeasured however many repeats follow)."""
    return [r for r in rows if r.check in TIMING_CHECKS and r.status == "inconclusive"
            and not r.detail.startswith(UNEXERCISED) and UNPAIRED not in r.detail]


def stop_reason(policy: RepeatPolicy, rows: Sequence[CheckResult], durations_s: Sequence[float]) -> StopReason | None:
    """Why the run stops after the repeats that took ``durations_s`` (one entry per repeat done) and were scored
    into ``rows``; None: earn another repeat. Before the minimum nothing is looked at."""
    done = len(durations_s)
    if done < policy.minimum:
        return None
    if not undecided(rows):
        return "decided"
    if done >= policy.maximum:
        return "repeats_max"
    if sum(durations_s) + max(durations_s) > policy.budget_s:
        return "budget"
    return None


def extend_plan(plan: RunPlan, repeat: int, run_seed: int) -> RunPlan:
    """The plan with one more repeat's trials, numbered and seeded as ``build_plan`` would have planned them.

    The fingerprint stays: it names the configuration (repeats_max and budget included), whose plan this is."""
    added = repeat_trials(len(plan.trials), plan.arms, tuple(w.name for w in plan.workloads), repeat, run_seed)
    return replace(plan, trials=plan.trials + added)


def _row(r: CheckResult) -> str:
    return f"{r.check} {r.workload} {r.arm}"


def look_line(policy: RepeatPolicy, done: int, rows: Sequence[CheckResult], stopped: StopReason | None) -> str:
    """The progress line after a look: what is still open, and whether the run stops or earns a repeat."""
    open_rows = undecided(rows)
    look = policy.look(done)
    head = (f"look {look} of {policy.looks}, after repeat {done} (repeats {policy.minimum}..{policy.maximum}, "
            f"confidence {policy.look_confidence(look):.4g}): ")
    what = f"{len(open_rows)} timing row(s) inconclusive ({', '.join(map(_row, open_rows[:3]))})" if open_rows \
        else "every timing row decided"
    then = f"stop ({stopped})" if stopped else f"earning repeat {done + 1}"
    return f"{head}{what}; {then}"


def repeats_entry(policy: RepeatPolicy, durations_s: Sequence[float], rows: Sequence[CheckResult],
                  stopped: str) -> dict[str, Any]:
    """bundle.json's ``repeats``: how many ran, why the run stopped, and the level every look was scored at."""
    return {
        "ran": len(durations_s),
        "minimum": policy.minimum,
        "maximum": policy.maximum,
        "stopped": stopped,  # decided | repeats_max | budget | error | interrupted
        "looks": max(len(durations_s) - policy.minimum + 1, 0),
        "confidence": policy.confidence,  # nominal, over all looks together
        "confidence_at_stop": policy.look_confidence(policy.look(len(durations_s))),  # the final verdict's
        "confidence_interim": policy.look_confidence(1),  # every look before the last possible one
        "budget_minutes": policy.budget_s / 60.0,
        "repeat_seconds": [round(d, 3) for d in durations_s],
        "undecided": [_row(r) for r in undecided(rows)],
    }
