"""Records -> summaries, aggregates and check verdicts: the one scoring step a run and a re-scoring share.

``python -m hybridbench`` scores the records it just saved; ``python -m hybridbench.rescore`` scores the
records of a saved run with other settings. Both call ``score_trials``, so the same files and the same
settings give the same verdicts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hybridbench.checks.accuracy import accuracy_rows
from hybridbench.checks.base import CheckInput, CheckResult
from hybridbench.checks.registry import run_checks
from hybridbench.config.schema import ChecksCfg
from hybridbench.metrics.summary import aggregate, summarize
from hybridbench.records.coverage import TrialOutcome, coverage
from hybridbench.records.kl import KlSample
from hybridbench.records.schema import Record

__all__ = ["ALWAYS_JUDGED", "ScoreSettings", "Scored", "judged_by_of", "only_where_judged", "score_trials", "unjudged"]

# Whether the server survived a load is worth knowing on every load, whatever the load was built to test.
ALWAYS_JUDGED = frozenset({"survival"})


@dataclass(frozen=True, slots=True)
class ScoreSettings:
    """Everything the verdicts depend on besides the saved files."""

    checks: ChecksCfg
    seed: int
    kl_threshold: float
    timing: str = "wall"  # EngineCfg.timing: the clock the timing checks judge (wall | modelled)
    # workload -> the checks that judge it (its ``judged_by``); a workload absent here is judged by every check.
    judged_by: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Scored:
    trials: list[dict[str, Any]] = field(default_factory=list)  # bundle.json's per-trial lines
    aggregates: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    checks: list[CheckResult] = field(default_factory=list)
    accuracy: list[dict[str, Any]] = field(default_factory=list)  # the accuracy probe's answers, per arm and pass


def score_trials(
    outcomes: Sequence[TrialOutcome],
    records: Mapping[str, Sequence[Record]],
    snapshots: Mapping[str, Mapping[str, Any]],
    kl_samples: Sequence[KlSample],
    *,
    arms: tuple[str, ...],
    baseline_arm: str,
    workloads: tuple[str, ...],
    settings: ScoreSettings,
    cache_off: frozenset[str] = frozenset(),
    policy_only: frozenset[str] = frozenset(),
    probe_samples: Mapping[str, Sequence[Any]] | None = None,
) -> Scored:
    """Score every planned trial (``outcomes``, in plan order: whether it ran) from its ``records`` and the
    server's ``snapshots`` (both by trial id) under ``settings``; ``cache_off`` names the arms whose spec has the
    cache off (``hybridbench.plan.arms.cache_off_arms``), ``policy_only`` those that differ from the baseline in
    the eviction policy alone (``policy_only_arms``); ``probe_samples`` are the other post-trial probes'
    samples by probe name (the checks that read them find them in ``CheckInput.samples``)."""
    trials_out: list[dict[str, Any]] = []
    pooled: dict[tuple[str, str], list[Record]] = defaultdict(list)
    trial_summaries: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    snaps: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    by_pair: dict[tuple[str, str], list[TrialOutcome]] = defaultdict(list)
    for done in outcomes:
        key = (done.workload, done.arm)
        by_pair[key].append(done)
        recs = list(records.get(done.trial_id, []))
        # Without a planned count, the records are measured against themselves (shown; survival judges the gap)
        cover = coverage(len({r.request_index for r in recs}) if done.planned_requests is None
                         else done.planned_requests, recs)
        entry = {"trial_id": done.trial_id, "arm": done.arm, "workload": done.workload, "repeat": done.repeat,
                 "state": done.state, "planned_requests": done.planned_requests,
                 "recorded_requests": cover.recorded, "duplicated_records": cover.duplicated}
        if done.detail:  # kept so that a re-scoring sees why a trial did not run to its end
            entry["detail"] = done.detail
        if done.state == "not run":
            trials_out.append(entry)
            continue
        summary = summarize(recs)
        snapshot = dict(snapshots.get(done.trial_id, {}))
        pooled[key].extend(recs)
        trial_summaries[key].append(summary)
        snaps[key].append(snapshot)
        trials_out.append({**entry, "summary": summary, "server": snapshot})
    kl: dict[tuple[str, str], list[KlSample]] = defaultdict(list)
    for sample in kl_samples:
        kl[(sample.workload, sample.arm)].append(sample)
    aggregates = {w: {arm: aggregate(pooled[(w, arm)], trial_summaries[(w, arm)]) for arm in arms}
                  for w in workloads}
    checks = run_checks(
        settings.checks.enabled,
        CheckInput(settings.checks, arms, baseline_arm, workloads, dict(pooled), dict(trial_summaries), dict(snaps),
                   settings.seed, dict(kl), settings.kl_threshold, trials=dict(by_pair), cache_off=cache_off,
                   policy_only=policy_only,
                   samples={name: list(s) for name, s in (probe_samples or {}).items()}, timing=settings.timing),
    )
    accuracy = accuracy_rows((probe_samples or {}).get("accuracy", ()), arms)
    checks = only_where_judged(checks, settings.judged_by, workloads)
    checks += unjudged(settings.judged_by, settings.checks.enabled, workloads)
    return Scored(trials_out, aggregates, checks, accuracy)


def unjudged(judged_by: Mapping[str, frozenset[str]], enabled: Sequence[str],
             workloads: Sequence[str]) -> list[CheckResult]:
    """An inconclusive row for each check a workload is judged by that is not enabled, where none of its checks
    besides survival is: what the load was built to test went untested, and survival alone would have passed it.
    A workload judged by survival alone (``judged_by: [survival]``), or a run that enables survival alone, asked
    only that question: its pass stands."""
    out: list[CheckResult] = []
    if set(enabled) <= ALWAYS_JUDGED:  # the run asked only whether the server survived
        return out
    for w in workloads:
        wanted = sorted(judged_by.get(w, frozenset()) - ALWAYS_JUDGED)
        if wanted and not set(wanted) & set(enabled):
            out += [CheckResult(name, w, "-", "inconclusive", None, f"{name} enabled (checks.enabled)",
                                f"workload {w} is judged by {', '.join(wanted)} (workloads.{w}.judged_by), none of "
                                "them enabled (checks.enabled): only survival judged it") for name in wanted]
    return out


def only_where_judged(rows: Sequence[CheckResult], judged_by: Mapping[str, frozenset[str]],
                      workloads: Sequence[str] = ()) -> list[CheckResult]:
    """A verdict on a workload that does not declare the check (``workloads.W.judged_by``) becomes a skip row saying
    what the load tests instead: the seglen PR's ShareGPT first turns evict nothing on GPU pools, so an eviction
    verdict there could only be inconclusive and would turn every run red. ``survival`` judges every load. A
    whole-run row (workload ``-``: the check found nothing to judge) of a check no workload of ``workloads`` is
    judged by is a skip too: nothing was asked of it."""
    out = []
    for r in rows:
        judges = judged_by.get(r.workload)
        unasked = r.workload == "-" and bool(workloads) and all(
            (j := judged_by.get(w)) and r.check not in j for w in workloads)
        if unasked and r.check not in ALWAYS_JUDGED:
            out.append(CheckResult(r.check, r.workload, r.arm, "skip", None, "-",
                                   f"not judged: no workload is judged by {r.check} (workloads.*.judged_by)"))
        elif judges and r.check not in judges and r.check not in ALWAYS_JUDGED:
            out.append(CheckResult(r.check, r.workload, r.arm, "skip", None, "-",
                                   f"not judged: workload {r.workload} tests {', '.join(sorted(judges))} "
                                   f"(workloads.{r.workload}.judged_by)"))
        else:
            out.append(r)
    return out


def judged_by_of(workloads: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """``judged_by`` of each workload of a resolved config (plan.json's ``workloads``) that declares one."""
    out = {}
    for name, w in workloads.items():
        judges = w.get("judged_by") if isinstance(w, Mapping) else getattr(w, "judged_by", None)
        if judges:
            out[str(name)] = frozenset(map(str, judges))
    return out
