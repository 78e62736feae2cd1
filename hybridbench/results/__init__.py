"""Saved runs, read and written: ``read_run(path)`` gives a ``Run`` (plan, bundle, trials with records, probe
samples) as frozen values; ``bundle`` builds bundle.json; ``index`` appends to index.jsonl."""

from hybridbench.results.reader import KL_SAMPLES, read_bundle, read_kl_samples, read_plan, read_records, read_run
from hybridbench.results.types import (
    Bundle,
    EngineBuildInfo,
    PlannedTrial,
    PlannedWorkload,
    Provenance,
    Run,
    SavedPlan,
    TrialResult,
    TrialRun,
)

__all__ = [
    "KL_SAMPLES",
    "Bundle",
    "EngineBuildInfo",
    "PlannedTrial",
    "PlannedWorkload",
    "Provenance",
    "Run",
    "SavedPlan",
    "TrialResult",
    "TrialRun",
    "read_bundle",
    "read_kl_samples",
    "read_plan",
    "read_records",
    "read_run",
]
