"""Saved runs, read and written. ``read_run(path)`` gives a ``Run`` (plan, bundle, trials with their records,
probe samples) as frozen values; ``read_usage(run)`` the server's token and mamba usage over time from its saved
logs; ``read_index`` lists the runs that finished beside each other (index.jsonl).
``bundle`` builds bundle.json, ``index`` appends to index.jsonl, ``score`` turns records into verdicts."""

from hybridbench.results.reader import (
    KL_SAMPLES,
    read_bundle,
    read_index,
    read_kl_samples,
    read_plan,
    read_records,
    read_run,
)
from hybridbench.results.types import (
    Bundle,
    EngineBuildInfo,
    IndexEntry,
    PlannedTrial,
    PlannedWorkload,
    Provenance,
    Run,
    SavedPlan,
    TrialResult,
    TrialRun,
)
from hybridbench.results.usage import ServerUsage, UsagePoint, UsageSeries, read_usage

__all__ = [
    "KL_SAMPLES", "Bundle", "EngineBuildInfo", "IndexEntry", "PlannedTrial", "PlannedWorkload", "Provenance", "Run",
    "SavedPlan", "ServerUsage", "TrialResult", "TrialRun", "UsagePoint", "UsageSeries", "read_bundle", "read_index",
    "read_kl_samples", "read_plan", "read_records", "read_run", "read_usage",
]
