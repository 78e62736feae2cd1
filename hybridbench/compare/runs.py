"""A finished run as a comparison sees it: the run read by ``hybridbench.results`` plus what identifies the
requests each workload sent (so two runs are compared only on identical traces).

Comparison works from saved files alone, like every check: a main-branch run from last night and a pull
request's run from this morning are just two directories.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridbench.records.schema import Record
from hybridbench.results import PlannedWorkload, Run, TrialRun, read_run
from hybridbench.results.trace_digest import trace_digest

__all__ = ["SavedRun", "WorkloadDigest", "load_run"]


@dataclass(frozen=True, slots=True)
class WorkloadDigest:
    argv: str  # sha256 of the generator arguments (without the output path)
    trace: str | None  # sha256 of the trace's bytes: recorded in plan.json, else the saved file's; None: neither


@dataclass(frozen=True, slots=True)
class SavedRun:
    run: Run
    workload_digests: dict[str, WorkloadDigest]  # workload name -> what identifies the requests it sent

    @property
    def path(self) -> Path:
        return self.run.path

    @property
    def engine(self) -> str:
        return self.run.plan.engine

    @property
    def model(self) -> str:
        return self.run.plan.model

    @property
    def gpus(self) -> list[str]:
        return self.run.gpus

    @property
    def cpu(self) -> str:
        """The host CPU bundle.json recorded ("" for a run without one, or an older bundle)."""
        return self.run.bundle.provenance.cpu if self.run.bundle is not None else ""

    @property
    def arms(self) -> tuple[str, ...]:
        return self.run.plan.arms

    @property
    def config(self) -> Mapping[str, Any]:
        return self.run.plan.config

    @property
    def created(self) -> str:
        """bundle.json's timestamp: two directories with the same one are one run copied."""
        return self.run.bundle.created if self.run.bundle is not None else ""

    @property
    def trials(self) -> tuple[TrialRun, ...]:
        return self.run.trials

    @property
    def modelled(self) -> bool:
        return self.engine == "sim"

    def label(self) -> str:
        """The run dir, the PR number, and the engine build (main's and a PR's run share hybridbench's sha)."""
        parts = [self.path.name]
        if self.run.bundle is not None:
            prov = self.run.bundle.provenance
            build = " ".join(x for x in (prov.engine.name, prov.engine.version) if x)
            parts += ([f"PR {prov.pr_number}"] if prov.pr_number else []) + ([build] if build else [])
        return " · ".join(parts)

    def records(self, workload: str, arm: str) -> list[Record]:
        return self.run.records_of(workload, arm)

    def trials_of(self, workload: str, arm: str) -> tuple[TrialRun, ...]:
        return self.run.trials_of(workload, arm)

    def missing_trials(self, workload: str, arm: str) -> int:
        return self.run.missing_trials(workload, arm)


def _digest(run: Run, w: PlannedWorkload) -> WorkloadDigest:
    """The generator arguments without the output path; and the trace's digest (results.trace_digest's one rule:
    the one plan.json recorded, else the saved file's bytes; a run copied without its traces and from before the
    digest was recorded still compares by arguments)."""
    kept = [a for i, a in enumerate(w.argv) if a != "-o" and (i == 0 or w.argv[i - 1] != "-o")]
    return WorkloadDigest(hashlib.sha256(json.dumps(kept).encode()).hexdigest(), trace_digest(run, w))


def load_run(path: Path) -> SavedRun:
    run = read_run(path)
    digests = {w.name: _digest(run, w) for w in run.plan.workloads}
    return SavedRun(run, digests)
