"""Two saved runs of the same experiment, compared arm by arm: main's build against a pull request's.

Each (workload, arm) the runs share gets four verdicts in three outcomes (hybridbench.metrics.decision): ``pass``
when the whole confidence interval lies inside the tolerance, ``fail`` when it lies wholly beyond, ``inconclusive``
otherwise — so neither run-to-run noise fails a pull request nor a comparison too small to tell passes one:

- ``ttft``: mean TTFT, a Welch t-interval over the per-repeat means (so drift between repeats counts as
  spread); with fewer than two repeats a side it is ``inconclusive``, the bootstrap over request pairs (each
  request paired with its twin in the other run: the traces are identical) shown as advisory only;
- ``throughput``: request throughput, a Welch t-interval over the runs' repeats (two runs share no
  repeat to pair, unlike the arms of one run) — ``inconclusive`` below two repeats on each side;
- ``token_hit_rate``: absolute change of cached / prompt tokens, under TTFT's repeats rule: a Welch t-interval over
  the per-repeat rates, ``inconclusive`` with fewer than two repeats a side (hybridbench.compare.hit_rate);
- ``survival``: the candidate lost requests (or its server died) where the baseline lost none; a (workload, arm)
  the baseline ran and the candidate did not is ``inconclusive``.

Runs are comparable only when they drove the same engine kind and model with byte-identical traces;
anything else is refused with the difference named (exit 2), never silently compared.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hybridbench.checks.base import run_verdict
from hybridbench.compare.comparable import (
    check_comparable,
    config_changes,
    other_cpu,
    planted_in_baseline,
    unknown_gpus,
)
from hybridbench.compare.deltas import CompareCfg, Delta, interval_row, skip_row, undecided_row
from hybridbench.compare.hit_rate import hit_rate_row
from hybridbench.compare.repeats import per_repeat, unmeasured_repeats
from hybridbench.compare.runs import SavedRun
from hybridbench.compare.uncompared import survival_alone
from hybridbench.errors import ConfigError
from hybridbench.metrics.stats import paired_bootstrap, welch_relative_change
from hybridbench.metrics.summary import summarize
from hybridbench.plan.build import derive_seed
from hybridbench.records.coverage import Coverage, coverage
from hybridbench.records.schema import Record
from hybridbench.records.timed import untimed, untimed_detail
from hybridbench.results import TrialRun

__all__ = ["CompareCfg", "Comparison", "Delta", "compare_runs", "config_changes"]


@dataclass(frozen=True, slots=True)
class Comparison:
    base: str
    candidate: str
    engine: str
    model: str
    modelled: bool
    pairs: tuple[tuple[str, str], ...]  # (workload, arm) compared
    not_compared: tuple[str, ...]  # what only one run has, said in words
    config_changes: tuple[tuple[str, Any, Any], ...]  # (dotted key, base value, candidate value)
    deltas: tuple[Delta, ...]

    @property
    def verdict(self) -> str:
        # Pass only on a verdict that passed: two runs that both lost everything skip every row, and decided nothing.
        # Nor does survival alone: with every TTFT, throughput and hit-rate row skipped (one repeat a side, a baseline
        # that lost everything) nothing says the candidate did not regress, so the comparison is inconclusive.
        verdict = run_verdict(d.status for d in self.deltas)
        if verdict == "pass" and all(d.status == "skip" for d in self.deltas if d.metric != "survival"):
            return "inconclusive"
        return verdict


def _timing(base: SavedRun, cand: SavedRun) -> str:
    """The clock both runs' timing checks judged (engine.timing): modelled only when both were the reference server's
    modelled clock; wall otherwise (and always on a GPU engine)."""
    clocks = {str((run.config.get("engine") or {}).get("timing", "wall")) for run in (base, cand)}
    return "modelled" if clocks == {"modelled"} and base.engine == "reference" else "wall"


def _ttft_change(pairs: Sequence[tuple[float, float]]) -> float:
    base = sum(b for b, _ in pairs)
    return sum(c for _, c in pairs) / base - 1 if base > 0 else math.nan


def _failed_trials(recs: Sequence[Record]) -> set[str]:
    """The trials with a request sent and failed: their skipped turns are that failure's, not losses of their own."""
    return {r.trial_id for r in recs if r.status not in ("ok", "skipped")}


def _broken(t: TrialRun) -> str:
    """Why a trial's server counts as lost: it died or hung, it crashed (the snapshot's ``crashes``, which the
    run's own survival check counts), or its log showed a known failure signature (``server_failures``) though it
    went on answering."""
    server = t.result.server if t.result is not None else {}
    logged = server.get("server_failures") or []
    crashes = server.get("crashes") or 0  # typed by the reader: an int >= 0
    return t.infrastructure_error or (f"the server logged: {logged[0]}" if isinstance(logged, list) and logged
                                      else f"the server crashed {crashes} time(s)" if crashes else "")


def _pair(base: SavedRun, cand: SavedRun, workload: str, arm: str, cfg: CompareCfg) -> list[Delta]:
    b_recs, c_recs = base.records(workload, arm), cand.records(workload, arm)
    b_ok = [r for r in b_recs if r.status == "ok"]
    c_ok = [r for r in c_recs if r.status == "ok"]
    seed = derive_seed(cfg.seed, "compare", workload, arm)
    b_trials, c_trials = base.trials_of(workload, arm), cand.trials_of(workload, arm)
    b_sums, c_sums = ([summarize(t.records) for t in trials] for trials in (b_trials, c_trials))
    out: list[Delta] = []

    # The traces are identical, so either run's count of a trial's requests is both runs'. A trial that never ran
    # lost all of them, not one (counted as one, a candidate missing a whole trial "lost fewer" than a baseline with
    # a few failed requests); and a run that says no count (killed before bundle.json, copied without traces/) is
    # held to the other's, not to the requests it happened to record (a trial cut off at its tail looked whole).
    known = next((t.planned_requests for run in (base, cand) for t in run.trials
                  if t.trial.workload == workload and t.planned_requests), None)

    def covered(t: TrialRun) -> Coverage:
        return coverage(known, t.records) if t.planned_requests is None and known is not None else t.coverage

    def lost(run: SavedRun, recs: list[Record], ok: list[Record]) -> int:
        """Failed requests, planned requests with no record, dead servers and the requests of trials that never
        ran. A turn not sent because its session's earlier turn failed is not one more loss: where in a session
        a failure falls would otherwise weigh it (and a run recorded before turns were skipped sent them). A turn
        not sent in a trial with no failure is a loss: nothing explains it."""
        trials = run.trials_of(workload, arm)
        failed = _failed_trials(recs)
        skipped = sum(1 for r in recs if r.status == "skipped" and r.trial_id in failed)
        return (len(recs) - len(ok) - skipped + sum(covered(t).missing for t in trials)
                + sum(1 for t in trials if _broken(t)) + run.missing_trials(workload, arm) * (known or 1))

    def lost_requests(run: SavedRun, *, sent_only: bool) -> set[tuple[int, int]]:
        """Which requests (repeat, index; -1 for a dead server or an uncounted trial) ``run`` lost; ``sent_only``:
        only those it sent and saw fail, not those it never sent."""
        ran = {t.trial_id: t for t in run.trials_of(workload, arm)}
        out: set[tuple[int, int]] = set()
        for planned in (p for p in run.run.plan.trials if p.workload == workload and p.arm == arm):
            t = ran.get(planned.trial_id)
            out |= {(planned.repeat, r.request_index) for r in (t.records if t else ())
                    if r.status not in ("ok", "skipped")}
            if sent_only:
                continue
            if t is not None and not _failed_trials(t.records):  # turns not sent, no failure to explain them
                out |= {(planned.repeat, r.request_index) for r in t.records if r.status == "skipped"}
            recorded = {r.request_index for r in t.records} if t else set()
            count = (t.planned_requests if t and t.planned_requests is not None else known)
            out |= {(planned.repeat, i) for i in range(count or 0) if i not in recorded}
            if (t is None and count is None) or (t is not None and _broken(t)):
                out.add((planned.repeat, -1))
        return out

    def why_lost(run: SavedRun) -> str:
        trials = run.trials_of(workload, arm)
        return next((why for t in trials if (why := _broken(t))),
                    next((f"{t.trial_id}: {covered(t).describe()}" for t in trials if covered(t).missing),
                         f"{run.missing_trials(workload, arm)} planned trial(s) never ran"))

    b_lost, c_lost = lost(base, b_recs, b_ok), lost(cand, c_recs, c_ok)
    expected = "no more requests, trials or servers lost than the baseline lost"
    uncounted = known is None and any(t.planned_requests is None for t in cand.trials_of(workload, arm))
    if c_lost == 0 and uncounted:  # neither run says how many were planned: a lost tail would not show
        out.append(undecided_row(("survival", workload, arm), expected,
                              f"all {len(c_recs)} recorded requests completed, but neither run says how many were "
                              "planned (no planned_requests in bundle.json, no trace): a lost tail would not show",
                              limit=0.0, base=float(b_lost), cand=0.0))
    elif c_lost == 0:
        out.append(Delta("survival", workload, arm, "pass", float(b_lost), 0.0, None, None, None, expected,
                         f"all {len(c_recs)} requests completed"))
    elif c_lost > b_lost:  # losses are rare events, not noise: any more than main's is a regression
        bad = next((f"{r.status}: {r.error}" for r in c_recs if r.status != "ok"), why_lost(cand))
        out.append(Delta("survival", workload, arm, "fail", float(b_lost), float(c_lost), None, None, None, expected,
                         f"{c_lost} loss(es) in the candidate against {b_lost} in the baseline ({bad[:200]})"))
    elif lost_requests(cand, sent_only=False) <= lost_requests(base, sent_only=base.run.bundle is None):
        # Every request the candidate lost, the baseline lost too; a baseline that did not finish (no bundle.json:
        # killed, or copied without it) vouches only for what it sent and saw fail, not for what it never sent.
        out.append(skip_row(("survival", workload, arm), expected,
                         f"every request the candidate lost, the baseline lost too ({b_lost} baseline, {c_lost} "
                         "candidate): not a regression", base=float(b_lost), cand=float(c_lost)))
    else:
        # As many lost, but not the same: no regression shown, none ruled out; the candidate's own run fails
        # survival regardless.
        bad = next((f"{r.status}: {r.error}" for r in c_recs if r.status not in ("ok", "skipped")), why_lost(cand))
        out.append(undecided_row(("survival", workload, arm), expected,
                              f"both runs lost requests, not the same ones ({b_lost} baseline, {c_lost} candidate: "
                              f"{bad[:160]}): a regression cannot be told from the baseline's own losses", limit=0.0,
                              base=float(b_lost), cand=float(c_lost)))

    # Request i of repeat r in one run is request i of repeat r in the other (identical traces): pair them.
    twins = {(r.repeat, r.request_index): r for r in b_ok}
    pairs = [(twin, r) for r in c_ok if (twin := twins.get((r.repeat, r.request_index))) is not None]
    timed = [(bt, ct) for b, c in pairs if (bt := b.ttft_ms) is not None and (ct := c.ttft_ms) is not None]
    pre = "modelled_" if _timing(base, cand) == "modelled" else ""
    b_rep, c_rep = per_repeat(b_sums, f"{pre}mean_ttft_ms"), per_repeat(c_sums, f"{pre}mean_ttft_ms")
    expected = f"mean TTFT change <= +{cfg.ttft_regression:.0%}"
    if len(b_rep) >= 2 and len(c_rep) >= 2:
        # Repeats on both sides: their spread is the run-level drift a request bootstrap cannot see.
        ch = welch_relative_change(b_rep, c_rep, confidence=cfg.confidence)
        out.append(interval_row(("ttft", workload, arm), statistics.fmean(b_rep), statistics.fmean(c_rep), ch,
                             limit=cfg.ttft_regression, expected=expected, higher_is_worse=True, relative=True,
                             confidence=cfg.confidence))
    elif timed:
        # Fewer than two repeats a side: a request-pair interval sees request noise but not the drift between two
        # runs (a third of mean TTFT on a shared machine), so it is shown, and the row decides nothing.
        ch = paired_bootstrap(timed, _ttft_change, samples=cfg.bootstrap_samples, confidence=cfg.confidence,
                              seed=seed)
        out.append(undecided_row(("ttft", workload, arm), expected,
                              f"{len(b_rep)} baseline and {len(c_rep)} candidate repeat(s): a verdict needs >= 2 a "
                              f"side; advisory {ch.estimate:+.1%} (request pairs, CI {ch.low:+.1%} .. {ch.high:+.1%})",
                              limit=cfg.ttft_regression, base=statistics.fmean(b for b, _ in timed),
                              cand=statistics.fmean(c for _, c in timed)))
    else:  # a side that completed nothing is survival's; completed requests without a TTFT are unmeasured
        why = f"no request completed with a TTFT in both runs ({len(b_ok)} baseline, {len(c_ok)} candidate completed)"
        out.append(undecided_row(("ttft", workload, arm), expected, why, limit=cfg.ttft_regression) if b_ok and c_ok
                   else skip_row(("ttft", workload, arm), expected, why))

    b_tp, c_tp = per_repeat(b_sums, f"{pre}request_throughput"), per_repeat(c_sums, f"{pre}request_throughput")
    expected = f"request throughput change >= -{cfg.throughput_regression:.0%}"
    ch = welch_relative_change(b_tp, c_tp, confidence=cfg.confidence)
    if not any(b_tp) or not any(c_tp):  # a side that completed no request has no throughput to compare (as TTFT)
        out.append(skip_row(("throughput", workload, arm), expected,
                         f"{len(b_tp)} baseline and {len(c_tp)} candidate repeat(s) with completed requests",
                         base=statistics.fmean(b_tp) if b_tp else None, cand=statistics.fmean(c_tp) if c_tp else None))
    elif math.isnan(ch.high):
        out.append(undecided_row(("throughput", workload, arm), expected,
                              f"{len(b_tp)} baseline and {len(c_tp)} candidate repeat(s) with completed requests: "
                              "a verdict needs >= 2 each", limit=-cfg.throughput_regression,
                              base=statistics.fmean(b_tp) if b_tp else None,
                              cand=statistics.fmean(c_tp) if c_tp else None))
    else:
        out.append(interval_row(("throughput", workload, arm), statistics.fmean(b_tp), statistics.fmean(c_tp), ch,
                             limit=cfg.throughput_regression, expected=expected, higher_is_worse=False,
                             relative=True, confidence=cfg.confidence))

    # Completed records whose times cannot be believed: no timing row stands on them, nor the candidate's survival
    unseen = "; ".join(untimed_detail(bad, who=side) for side, bad in (("baseline", untimed(b_ok)),
                                                                      ("candidate", untimed(c_ok))) if bad)
    if why := (unseen or other_cpu(base, cand, _timing(base, cand))):  # (else: the hardware may be what changed)
        out = [replace(d, status="inconclusive", detail=f"{why}; {d.detail}")
               if (d.metric in ("ttft", "throughput") and d.status != "skip")
               or (d.metric == "survival" and d.status == "pass" and untimed(c_ok)) else d for d in out]
    sides = (("baseline", b_trials, b_sums), ("candidate", c_trials, c_sums))
    planted = planted_in_baseline(base, cand, arm)
    gaps = {m: "; ".join(filter(None, (unmeasured_repeats(sides, f"{pre}{key}"), planted)))
            for m, key in (("ttft", "mean_ttft_ms"), ("throughput", "request_throughput"))}
    out = [replace(d, status="inconclusive", detail=f"{gaps[d.metric]}; {d.detail}")  # a fail on the rest stands
           if gaps.get(d.metric) and d.status != "fail" else d for d in out]

    out.append(hit_rate_row((workload, arm), b_ok, c_ok, pairs, cfg, seed=seed))
    return out


def _check_distinct_and_whole(base: SavedRun, cand: SavedRun) -> None:
    """The same run twice compares equal by construction; a run whose records hold a request twice (a second run
    appended to the same records.jsonl) is not one run. Both are refused, never compared."""
    if base.path.resolve() == cand.path.resolve():
        raise ConfigError(f"not comparable: {base.path} is both the baseline and the candidate")
    if base.created and base.created == cand.created and base.config == cand.config:
        raise ConfigError(f"not comparable: {base.path} and {cand.path} are one run (same bundle, created "
                          f"{base.created}); compare two runs")
    # bundle.json's run id is drawn once per run: a copy keeps it whatever else was edited (plan.json's checks).
    ids = [str(r.run.bundle.raw.get("run_id") or "") if r.run.bundle is not None else "" for r in (base, cand)]
    if ids[0] and ids[0] == ids[1]:
        raise ConfigError(f"not comparable: {base.path} and {cand.path} are one run (bundle.json's run id "
                          f"{ids[0][:12]}); compare two runs")
    for side, run in (("baseline", base), ("candidate", cand)):
        twice = next((t for t in run.trials if t.coverage.duplicated), None)
        if twice is not None:
            raise ConfigError(f"{side} {run.path}: trial {twice.trial_id} has {twice.coverage.describe()} "
                              "(records of two runs in one directory?)")


def compare_runs(base: SavedRun, cand: SavedRun, cfg: CompareCfg) -> Comparison:
    _check_distinct_and_whole(base, cand)
    notes = check_comparable(base, cand)
    workloads = [w for w in base.workload_digests if w in cand.workload_digests]
    # Pairs both plans ran trials of: an arm a plan names with no trial of it is not a pair whose "0 of 0 lost" passes
    planned = [{(t.workload, t.arm) for t in r.run.plan.trials} for r in (base, cand)]
    shared = [(w, a) for w in workloads for a in base.arms if a in cand.arms]
    pairs = [p for p in shared if p in planned[0] and p in planned[1]]
    notes += [f"({w}, {a}) planned only in the candidate run" for w, a in shared
              if (w, a) in planned[1] - planned[0]]
    if not pairs:
        raise ConfigError("not comparable: the runs share no (workload, arm) pair")
    deltas = [d for w, a in pairs for d in survival_alone(_pair(base, cand, w, a, cfg))]
    # What the baseline ran and the candidate did not (a workload or arm dropped, perhaps the one that regressed)
    # is unjudged: the comparison is inconclusive, never a pass over what remains.
    deltas += [undecided_row(("survival", w, a), "every (workload, arm) of the baseline in the candidate",
                          "the candidate did not run it: not compared, so no regression is ruled out", limit=0.0)
               for w, a in dict.fromkeys((t.workload, t.arm) for t in base.run.plan.trials) if (w, a) not in pairs]
    if why := unknown_gpus(base, cand):  # the same GPUs are what make two builds comparable: a pass needs them known
        deltas.append(undecided_row(("survival", "-", "-"), "both runs' GPUs named by nvidia-smi", why, limit=0.0))
    return Comparison(
        base=base.label(),
        candidate=cand.label(),
        engine=base.engine,
        model=base.model,
        modelled=base.modelled,
        pairs=tuple(pairs),
        not_compared=tuple(notes),
        config_changes=tuple(config_changes(base.config, cand.config)),
        deltas=tuple(deltas),
    )
