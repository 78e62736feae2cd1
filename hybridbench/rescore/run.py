"""Re-score one run directory: read it (``hybridbench.results``), score its saved records, kl samples and
server snapshots with ``score_trials`` — the step the run itself used — and rewrite bundle.json and report.md.

What the run measured stays as it was: records, plan.json, traces and probe samples are only read. The
bundle keeps its provenance (the build that measured) and gains ``rescored``: when, by which hybridbench,
with which overrides; its ``provenance.config`` shows the settings the new verdicts were computed with.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from hybridbench.checks.base import run_verdict
from hybridbench.errors import ConfigError
from hybridbench.metrics.published import compare_published
from hybridbench.plan.arms import cache_off_arms, policy_only_arms, saved_specs
from hybridbench.records.coverage import TRIAL_STATES, TrialOutcome
from hybridbench.records.schema import Record
from hybridbench.report.markdown import render_report
from hybridbench.rescore.settings import effective_settings, parse_overrides
from hybridbench.results import PlannedTrial, Run, read_run
from hybridbench.results.index import append_to_index
from hybridbench.results.score import score_trials
from workloads.atomic_file import write_json_and_text_atomic

__all__ = ["rescore_run"]


def _version() -> str:
    try:
        return metadata.version("hybridbench")
    except metadata.PackageNotFoundError:
        return "unknown"


def _with_settings(config: Mapping[str, Any], checks: dict[str, Any], kl_threshold: float) -> dict[str, Any]:
    out = dict(config)
    out["checks"] = checks
    out["engine"] = {**(config.get("engine") or {}), "kl_threshold": kl_threshold}
    return out


def _outcome(run: Run, trial: PlannedTrial, records: Sequence[Record]) -> TrialOutcome:
    """What the run recorded about the trial; bundles written before trial states get them as the run would
    have: listed with a dead server's error -> engine died, listed -> ran, not listed -> not run."""
    assert run.bundle is not None
    result = run.bundle.trial(trial.trial_id)
    # The reader's count (the saved trace's rows where it is kept, else the bundle's): a bundle that counted the
    # trace's metadata line as a request is read at the trace's count.
    planned = next((t.planned_requests for t in run.trials if t.trial_id == trial.trial_id), None)
    if planned is None:  # an older bundle: the requests the trace holds, else unknown (survival: inconclusive)
        # The highest recorded index is no count: a trial that lost its last requests would look whole.
        planned = next((t.planned_requests for t in run.trials
                        if t.trial.workload == trial.workload and t.planned_requests is not None), None)
    if result is None:
        return TrialOutcome(trial.trial_id, trial.workload, trial.arm, trial.repeat, "not run", planned,
                            "the run ended before it")
    state = result.state if result.state in TRIAL_STATES else "ran"
    detail = result.detail or (result.infrastructure_error if state == "engine died" else "")
    return TrialOutcome(trial.trial_id, trial.workload, trial.arm, trial.repeat, state,  # type: ignore[arg-type]
                        planned, detail)


def _write_bundle_and_report(run_dir: Path, bundle: dict[str, Any]) -> None:
    """bundle.json and report.md, both or neither: a run dir that cannot take them (read-only, a directory where
    report.md goes) is one line, exit 2, and keeps its old bundle — never a new verdict beside the old report."""
    try:
        write_json_and_text_atomic(run_dir / "bundle.json", bundle, run_dir / "report.md", render_report(bundle))
    except IsADirectoryError as exc:
        raise ConfigError(f"{exc.filename}: is a directory; cannot write the report there") from None
    except OSError as exc:
        raise ConfigError(f"{run_dir}: cannot rewrite bundle.json and report.md ({exc.strerror or exc})") from None


def rescore_run(run_dir: Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Rewrite ``run_dir``'s bundle.json and report.md from its saved files; return the new bundle."""
    parsed = parse_overrides(overrides)
    run = read_run(run_dir)
    if run.bundle is None:
        raise ConfigError(f"{run_dir / 'bundle.json'}: missing (the run never finished); nothing to re-score")
    settings, baseline = effective_settings(run.plan, parsed)
    bundle = run.bundle
    unplanned = {t.trial_id for t in bundle.trials} - {t.trial_id for t in run.plan.trials}
    if unplanned:
        raise ConfigError(f"{run_dir / 'bundle.json'}: trial {sorted(unplanned)[0]} is not in plan.json")
    records: dict[str, list[Record]] = {}
    for rec in run.records:
        records.setdefault(rec.trial_id, []).append(rec)
    outcomes = [_outcome(run, t, records.get(t.trial_id, [])) for t in run.plan.trials]
    scored = score_trials(
        outcomes, records, {t.trial_id: t.server for t in bundle.trials}, run.kl_samples, arms=run.plan.arms,
        baseline_arm=baseline, workloads=tuple(w.name for w in run.plan.workloads), settings=settings,
        cache_off=cache_off_arms(run.plan.arms), policy_only=policy_only_arms(saved_specs(run.plan.arms), baseline),
        probe_samples=run.probe_samples,
    )
    config = _with_settings(run.plan.config, asdict(settings.checks), settings.kl_threshold)
    out = dict(bundle.raw)
    out.update(
        baseline_arm=baseline,
        trials=scored.trials,
        aggregates=scored.aggregates,
        checks=[asdict(c) for c in scored.checks],
        published=compare_published(config, scored.aggregates, run.gpus),
        accuracy=scored.accuracy,
        # A run whose server died or that was interrupted stays so, whatever the thresholds say.
        verdict=bundle.verdict if bundle.verdict in ("error", "interrupted")
        else run_verdict(c.status for c in scored.checks),
        provenance={**bundle.raw.get("provenance", {}), "config": config},
        rescored={"created": datetime.now(timezone.utc).isoformat(), "overrides": list(overrides),
                  "hybridbench_version": _version()},
    )
    _write_bundle_and_report(run_dir, out)
    try:  # a line of its own: the index's last line of a run is its current verdict
        append_to_index(run_dir, out)
    except OSError as exc:  # the run is re-scored on disk; an unwritable parent must not cost it
        print(f"warning: re-scored run not indexed ({exc.strerror or exc})", file=sys.stderr)
    return out
