"""The composition root: config -> plan -> engine -> load -> records -> metrics/checks -> bundle -> report.

The only module that imports every stage. Returns the process exit code (docs/reference/exit-codes.md).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from hybridbench.config.redact import scrub, scrub_obj, secret_values
from hybridbench.config.redact_files import scrub_tree
from hybridbench.config.schema import RunCfg
from hybridbench.doctor.machine import SERVES_WEIGHTS, fetch_weights
from hybridbench.engines.base import PlannedProbe, TrialContext
from hybridbench.engines.context_length import refuse_over_context
from hybridbench.engines.kv_pool import refuse_unfit_requests
from hybridbench.errors import ConfigError, EngineError, HybridbenchError, Interrupted, RunInterrupted
from hybridbench.plan.arms import policy_only_arms
from hybridbench.plan.build import effective_vocab
from hybridbench.plan.load import planned_schedules
from hybridbench.plan.repeats import (
    TIMING_CHECKS,
    StopReason,
    extend_plan,
    look_line,
    repeat_policy,
    repeats_entry,
    stop_reason,
)
from hybridbench.plan.types import RunPlan, Trial
from hybridbench.prepare import materialize, prepare_run, refuse_on_machine
from hybridbench.preview.accuracy_forecast import with_accuracy
from hybridbench.preview.forecast import run_forecast
from hybridbench.preview.forecast_warnings import forecast_warnings
from hybridbench.probes.base import read_samples, samples_path
from hybridbench.records.coverage import TrialOutcome, TrialState
from hybridbench.records.io import RecordWriter
from hybridbench.records.schema import Record
from hybridbench.report.markdown import render_report
from hybridbench.results import KL_SAMPLES, read_kl_samples, read_records
from hybridbench.results.bundle import build_bundle
from hybridbench.results.index import append_to_index
from hybridbench.results.run_dir import claim_run_dir, release_run_dir
from hybridbench.results.score import Scored, ScoreSettings, judged_by_of, score_trials
from hybridbench.results.trace_digest import file_sha256
from workloads.arrival import arrival_schedule
from workloads.atomic_file import write_json_atomic, write_text_atomic
from workloads.trace import TraceRow

__all__ = ["run"]


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _write_plan(run_dir: Path, plan: RunPlan, secrets: frozenset[str]) -> None:
    """plan.json, redacted, but for the traces' digests: a sha256 of the trace's bytes tells no secret, and masking
    a secret that happens to be spelt in hex inside one ("1234") left a digest every reader refuses (the run
    unreadable)."""
    data = scrub_obj(plan.to_json(), secrets)
    for w, saved in zip(plan.workloads, data.get("workloads", []), strict=True):
        if w.trace_sha256:
            saved["trace_sha256"] = w.trace_sha256
    write_json_atomic(run_dir / "plan.json", data)


def run(cfg: RunCfg, run_dir: Path, resolved: dict[str, Any]) -> int:
    prepared = prepare_run(cfg, run_dir, resolved)  # the plan-time path `hybridbench plan` shares
    refuse_on_machine(prepared)  # too few GPUs, absent weights with downloads off: exit 2 before any trace
    plan: RunPlan = prepared.plan
    engine, probes = prepared.engine, prepared.probes
    claim_run_dir(run_dir, overwrite=cfg.overwrite)  # last: overwrite empties it only for a valid run
    # One redaction for every file the run writes: what the config hides is masked wherever it shows up again
    # (a workload's argv, a server's last words quoting its command line, the logs).
    secrets = secret_values(resolved)
    _write_plan(run_dir, plan, secrets)
    traces: dict[str, list[TraceRow]] = {}
    records_path = run_dir / "records.jsonl"
    snapshots: dict[str, dict[str, Any]] = {}
    outcomes: dict[str, TrialOutcome] = {}
    failure: HybridbenchError | None = None  # what ended the run early: a dead server (exit 3) or a signal
    current: Trial | None = None
    forecast: dict[str, Any] = {}
    policy = repeat_policy(cfg)
    durations: list[float] = []  # seconds per full repeat
    stopped: StopReason | None = None

    def score(plan: RunPlan, only: frozenset[str] | None = None, *, with_samples: bool = True) -> Scored:
        """Every planned trial scored from the saved records, at the confidence of the look the repeats done so far
        make (a fixed count of repeats has one look, at the nominal level); ``only``: just these checks."""
        by_trial: dict[str, list[Record]] = defaultdict(list)
        for rec in read_records(records_path):
            by_trial[rec.trial_id].append(rec)
        checks = policy.checks_at_look(cfg.checks, policy.look(len(durations)))
        if only is not None:
            checks = replace(checks, enabled=[c for c in checks.enabled if c in only])
        return score_trials(
            [outcomes.get(t.trial_id) or outcome(t, "not run", f"the run ended before it ({failure})")
             for t in plan.trials], by_trial, snapshots,
            list(read_kl_samples(run_dir / KL_SAMPLES)) if with_samples else [], arms=plan.arms,
            baseline_arm=plan.baseline_arm, workloads=tuple(w.name for w in plan.workloads),
            settings=ScoreSettings(checks, cfg.seed, cfg.engine.kl_threshold, cfg.engine.timing,
                                   judged_by_of(cfg.workloads)),
            cache_off=frozenset(s.name for s in plan.arm_specs if not s.cache_on),
            policy_only=policy_only_arms(plan.arm_specs, plan.baseline_arm),
            probe_samples={p.name: tuple(read_samples(samples_path(run_dir, p.name), p.sample_from_json))
                           for p in probes} if with_samples else {},
        )

    def outcome(trial: Trial, state: TrialState, detail: str = "") -> TrialOutcome:
        return TrialOutcome(trial.trial_id, trial.workload, trial.arm, trial.repeat, state,
                            len(traces.get(trial.workload, ())), detail)

    try:
        try:
            try:
                for w in plan.workloads:
                    traces[w.name] = materialize(w, cfg, effective_vocab(cfg))
                # What each trace's bytes are, in plan.json before the first trial: history and compare tell two
                # loads apart by it where a changed generator left the arguments as they were.
                plan = plan.with_trace_digests({w.name: file_sha256(Path(w.trace_path), run_dir) or ""
                                                for w in plan.workloads})
                _write_plan(run_dir, plan, secrets)
                if (pool := engine.kv_pool(cfg)) is not None:  # the plan fixed the pool: each request must fit it
                    refuse_unfit_requests(engine.name, pool, traces)
                refuse_over_context(cfg, traces)  # and the context length the checkpoint's server takes
                # Every trial's arrivals, fixed before the first server starts: the driver and the simulator follow
                # them. One no consumer can follow (a slowdown of 1e300) is refused here, with the run dir released.
                schedules = planned_schedules(plan, traces)
            except ConfigError:
                release_run_dir(run_dir)  # refused before any trial: the run leaves nothing behind
                raise
            if cfg.engine.name in SERVES_WEIGHTS:  # a GPU run keeps what the simulator expected of it
                forecast = with_accuracy(run_forecast(cfg, resolved, traces), cfg, resolved)
                write_json_atomic(run_dir / "forecast.json", scrub_obj(forecast, secrets))
                for line in forecast_warnings(forecast, cfg):  # what `hybridbench plan` would have said
                    _progress(f"warning: {scrub_obj(line, secrets)}")
                fetch_weights(cfg, _progress)  # before the first server: its startup timeout starts after this
            with contextlib.ExitStack() as files:
                writer = files.enter_context(RecordWriter(records_path))
                # <probe>.jsonl exists only for the probes this run planned
                planned = tuple(PlannedProbe(p, files.enter_context(RecordWriter(samples_path(run_dir, p.name))).write)
                                for p in probes)
                while True:  # repeat by repeat: the plan's minimum, then any repeat the timing checks earn
                    started = time.monotonic()
                    for trial in [t for t in plan.trials if t.repeat == len(durations)]:
                        n = len(traces[trial.workload])
                        _progress(f"[{trial.index + 1}/{len(plan.trials)}] {trial.trial_id} ({n} requests)")
                        ctx = TrialContext(plan, trial, traces[trial.workload], writer.write, planned,
                                           schedule=schedules[trial.trial_id])
                        current = trial
                        try:
                            snapshots[trial.trial_id] = engine.run_trial(cfg, ctx)
                        except EngineError as exc:
                            # A dead or hung server is exit 3, but also what `survival` exists to report: the
                            # bundle and report still cover every trial that ran, this one failing survival.
                            snapshots[trial.trial_id] = {"infrastructure_error": str(exc)}
                            outcomes[trial.trial_id] = outcome(trial, "engine died", str(exc))
                            failure = exc
                            break
                        outcomes[trial.trial_id] = outcome(trial, "ran")
                    if failure is not None:
                        break
                    durations.append(time.monotonic() - started)
                    if len(durations) < policy.minimum:
                        continue
                    # A look: the timing checks over the records so far, by the code and at the level of the verdict.
                    interim = score(plan, TIMING_CHECKS, with_samples=False).checks
                    stopped = stop_reason(policy, interim, durations)
                    _progress(look_line(policy, len(durations), interim, stopped))
                    if stopped is not None:
                        break
                    plan = extend_plan(plan, len(durations), cfg.seed)
                    _write_plan(run_dir, plan, secrets)
                    schedules.update({t.trial_id: arrival_schedule(traces[t.workload], plan.workload(t.workload).load,
                                                                   t.seed)
                                      for t in plan.trials if t.repeat == len(durations)})
        finally:
            engine.close()
            scrub_tree(run_dir / "logs", secrets)
    except Interrupted as exc:
        # Ctrl-C, a CI cancel (SIGTERM), a closed terminal (SIGHUP): what ran is scored and written like any run.
        failure = RunInterrupted(f"interrupted by {exc.signame}; the bundle and report cover the trials that ran")
        if current is not None and current.trial_id not in outcomes:
            outcomes[current.trial_id] = outcome(current, "interrupted", exc.signame)
    for trial in plan.trials:
        if trial.trial_id not in outcomes:
            outcomes[trial.trial_id] = outcome(trial, "not run", f"the run ended before it ({failure})")
    # Metrics and checks work from the saved records, exactly as a later re-scoring would.
    scored = score(plan)
    bundle = build_bundle(plan, engine.info(), scored.trials, scored.aggregates, scored.checks)
    if scored.accuracy:
        bundle["accuracy"] = scored.accuracy
    if forecast:
        bundle["forecast"] = forecast
    bundle["repeats"] = repeats_entry(policy, durations, scored.checks,
                                      stopped or ("interrupted" if isinstance(failure, RunInterrupted) else "error"))
    if isinstance(failure, RunInterrupted):
        bundle.update(verdict="interrupted", interrupted=str(failure))
    elif failure is not None:
        bundle.update(verdict="error", infrastructure_error=str(failure))
    bundle = scrub_obj(bundle, secrets)
    write_json_atomic(run_dir / "bundle.json", bundle)
    try:
        append_to_index(run_dir, bundle)
    except OSError as exc:  # the run itself is complete on disk; an unwritable parent must not cost it
        print(f"warning: run not indexed ({exc.strerror or exc})", file=sys.stderr)
    report = render_report(bundle)
    write_text_atomic(run_dir / "report.md", report)
    print(report)
    print(f"results: {run_dir}", file=sys.stderr)
    if failure is not None:
        raise type(failure)(scrub(str(failure), secrets))
    return 1 if bundle["verdict"] in ("fail", "inconclusive") else 0
