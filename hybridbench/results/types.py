"""What a saved run holds, as frozen values: the public API of ``hybridbench.results`` (compare, rescore and
dashboards read runs through it, never by string keys of their own).

Summaries and aggregates stay mappings of bench_serving's key names (``workloads.bench_serving``): those keys
are the data format other tools read, and a newer run may carry more of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridbench.checks.base import CheckResult
from hybridbench.plan.types import Trial
from hybridbench.records.coverage import Coverage, coverage
from hybridbench.records.kl import KlSample
from hybridbench.records.schema import Record

__all__ = ["Bundle", "EngineBuildInfo", "IndexEntry", "PlannedTrial", "PlannedWorkload", "Provenance", "Run",
           "SavedPlan", "TrialResult", "TrialRun"]


@dataclass(frozen=True, slots=True)
class PlannedWorkload:
    name: str
    kind: str
    seed: int
    trace_path: str
    argv: tuple[str, ...]  # the generator arguments, output path included
    trace_sha256: str = ""  # the trace's bytes as the run wrote them (results.trace_digest); "" in older plans


# A planned trial is the plan's own type: its identity (trial_id) is defined once, in plan/types.py.
PlannedTrial = Trial


@dataclass(frozen=True, slots=True)
class SavedPlan:
    """plan.json: what the run set out to do."""

    schema_version: int
    name: str
    engine: str
    arms: tuple[str, ...]
    baseline_arm: str
    workloads: tuple[PlannedWorkload, ...]
    trials: tuple[PlannedTrial, ...]
    config: Mapping[str, Any]  # the resolved config, secrets redacted
    fingerprint: str

    @property
    def model(self) -> str:
        model = self.config.get("model")
        return str(model.get("name", "")) if isinstance(model, Mapping) else ""


@dataclass(frozen=True, slots=True)
class EngineBuildInfo:
    name: str
    version: str
    command: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Provenance:
    git_sha: str
    git_dirty: bool
    pr_number: str | None
    hybridbench_version: str
    engine: EngineBuildInfo
    plan_fingerprint: str
    config: Mapping[str, Any]
    command: str = ""  # the job's own command line (Hydra overrides), secrets masked; "" before bundles kept it
    # the host CPU, "<model name>, <N> cores" (bundle.json's provenance.machine); "" where not recorded (older bundles)
    cpu: str = ""


@dataclass(frozen=True, slots=True)
class TrialResult:
    """One trial's line in bundle.json: its summary and the server's snapshot (peaks, crashes, evictions)."""

    trial_id: str
    arm: str
    workload: str
    repeat: int
    summary: Mapping[str, Any]  # empty for a trial that never ran
    server: Mapping[str, Any]
    state: str = "ran"  # ran | not run | interrupted | engine died (bundles before states: ran or engine died)
    planned_requests: int | None = None  # None: written before bundles counted them
    recorded_requests: int | None = None
    duplicated_records: int | None = None
    detail: str = ""  # why it did not run to its end

    @property
    def infrastructure_error(self) -> str:
        """Non-empty: the server died or hung during this trial."""
        return str(self.server.get("infrastructure_error") or "")


@dataclass(frozen=True, slots=True)
class Bundle:
    """bundle.json: summaries, verdicts and provenance."""

    schema_version: int
    name: str
    created: str
    modelled: bool
    arms: tuple[str, ...]
    baseline_arm: str
    trials: tuple[TrialResult, ...]
    aggregates: Mapping[str, Mapping[str, Mapping[str, Any]]]  # workload -> arm -> summary across repeats
    checks: tuple[CheckResult, ...]
    verdict: str  # pass | fail | inconclusive | error (infrastructure)
    provenance: Provenance
    infrastructure_error: str = ""
    published: tuple[Mapping[str, Any], ...] = ()  # the seeds' published results beside this run
    rescored: Mapping[str, Any] | None = None  # set by `python -m hybridbench.rescore`: when and what changed
    run_id: str = ""  # bundle.json's own id (written since schema 1's run_id), else a hash of its content
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the file as read

    def trial(self, trial_id: str) -> TrialResult | None:
        return next((t for t in self.trials if t.trial_id == trial_id), None)


@dataclass(frozen=True, slots=True)
class TrialRun:
    """A planned trial that ran (it left records or a recorded failure), with its records."""

    trial: PlannedTrial
    records: tuple[Record, ...]
    result: TrialResult | None  # its bundle.json line, when the run got that far
    planned_requests: int | None = None  # bundle.json's count, else the trace's rows; None: neither says

    @property
    def trial_id(self) -> str:
        return self.trial.trial_id

    @property
    def state(self) -> str:
        return self.result.state if self.result is not None else "ran"

    @property
    def infrastructure_error(self) -> str:
        return self.result.infrastructure_error if self.result is not None else ""

    @property
    def coverage(self) -> Coverage:
        """Planned against recorded requests; a run without a count is measured against what it recorded."""
        planned = self.planned_requests
        if planned is None:
            planned = len({r.request_index for r in self.records})
        return coverage(planned, self.records)


@dataclass(frozen=True, slots=True)
class Run:
    """One run directory, read back: everything metrics, checks, compare and dashboards work from."""

    path: Path
    plan: SavedPlan
    bundle: Bundle | None  # None: the run ended before writing it
    trials: tuple[TrialRun, ...]  # planned trials that ran, in plan order (a run cut short ran fewer)
    kl_samples: tuple[KlSample, ...] = ()  # the kl probe's samples (kl.jsonl), when it ran
    # the other probes' samples by probe name (exact_hits.jsonl, ...), typed by their records/ schema
    probe_samples: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    @property
    def records(self) -> tuple[Record, ...]:
        return tuple(r for t in self.trials for r in t.records)

    @property
    def gpus(self) -> list[str]:
        """The GPUs nvidia-smi named for the server (bundle.json's provenance); empty when none were recorded."""
        names = self.bundle.provenance.engine.extra.get("gpus") if self.bundle is not None else None
        return [str(n) for n in names] if isinstance(names, list) else []

    def trials_of(self, workload: str, arm: str) -> tuple[TrialRun, ...]:
        return tuple(t for t in self.trials if t.trial.workload == workload and t.trial.arm == arm)

    def records_of(self, workload: str, arm: str) -> list[Record]:
        return [r for t in self.trials_of(workload, arm) for r in t.records]

    def planned_count(self, workload: str, arm: str) -> int:
        return sum(1 for t in self.plan.trials if t.workload == workload and t.arm == arm)

    def missing_trials(self, workload: str, arm: str) -> int:
        """Planned trials of the pair that never ran (the run ended early)."""
        return self.planned_count(workload, arm) - len(self.trials_of(workload, arm))


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One line of index.jsonl: a finished run as a dashboard lists it (``read_run(path)`` for the rest)."""

    path: Path
    name: str
    created: str
    verdict: str
    modelled: bool
    arms: tuple[str, ...]
    engine: str
    engine_version: str
    git_sha: str
    pr_number: str | None
    plan_fingerprint: str
    failed_checks: tuple[str, ...]  # "check:workload:arm"
    rescored: str = ""  # when `python -m hybridbench.rescore` wrote this verdict; "": the run's own
