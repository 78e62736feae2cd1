"""A finished run read back from its directory: plan.json, records.jsonl and (when present) bundle.json.

Comparison works from saved files alone, like every check: a main-branch run from last night and a pull
request's run from this morning are just two directories.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridbench.errors import ConfigError
from hybridbench.plan.types import Trial
from hybridbench.records.coverage import Coverage, coverage
from hybridbench.records.io import read_records
from hybridbench.records.schema import Record

__all__ = ["SavedRun", "TrialRecords", "WorkloadDigest", "load_run"]


@dataclass(frozen=True, slots=True)
class TrialRecords:
    trial_id: str
    arm: str
    workload: str
    repeat: int
    records: tuple[Record, ...]
    infrastructure_error: str = ""  # the server died or hung during this trial (from bundle.json)
    planned_requests: int | None = None  # None: neither bundle.json nor the trace says
    state: str = "ran"  # records.coverage.TrialState, from bundle.json (older bundles: ran)

    @property
    def coverage(self) -> Coverage:
        """Planned against recorded requests; a run without a count is measured against what it recorded."""
        planned = self.planned_requests
        if planned is None:
            planned = len({r.request_index for r in self.records})
        return coverage(planned, self.records)


@dataclass(frozen=True, slots=True)
class WorkloadDigest:
    argv: str  # sha256 of the generator arguments (without the output path)
    trace: str | None  # sha256 of the trace file, when the run directory still has it


@dataclass(frozen=True, slots=True)
class SavedRun:
    path: Path
    name: str
    engine: str
    model: str
    arms: tuple[str, ...]
    workload_digests: dict[str, WorkloadDigest]  # workload name -> what identifies the requests it sent
    trials: tuple[TrialRecords, ...]  # trials that ran (at least one record, or a recorded failure)
    planned: dict[tuple[str, str], int]  # (workload, arm) -> trials the plan had (a run cut short ran fewer)
    config: dict[str, Any]
    provenance: dict[str, Any] = field(default_factory=dict)  # bundle.json's, when the run got that far
    created: str = ""  # bundle.json's timestamp: two directories with the same one are one run copied

    @property
    def modelled(self) -> bool:
        return self.engine == "sim"

    def label(self) -> str:
        """The run dir, the PR number, and the engine build (main's and a PR's run share hybridbench's sha)."""
        found = self.provenance.get("engine")
        engine: dict[str, Any] = found if isinstance(found, dict) else {}
        build = " ".join(str(x) for x in (engine.get("name"), engine.get("version")) if x)
        pr = self.provenance.get("pr_number")
        parts = [self.path.name] + ([f"PR {pr}"] if pr else []) + ([build] if build else [])
        return " · ".join(parts)

    def records(self, workload: str, arm: str) -> list[Record]:
        return [r for t in self.trials if t.workload == workload and t.arm == arm for r in t.records]

    def trials_of(self, workload: str, arm: str) -> list[TrialRecords]:
        return [t for t in self.trials if t.workload == workload and t.arm == arm]

    def missing_trials(self, workload: str, arm: str) -> int:
        """Planned trials of the pair that never ran (the run ended early)."""
        return self.planned.get((workload, arm), 0) - len(self.trials_of(workload, arm))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def _digest(trace: Path, argv: list[str]) -> WorkloadDigest:
    """The generator arguments without the output path; and the trace's bytes when the file is there (a run
    copied without its traces still compares by arguments)."""
    kept = [a for i, a in enumerate(argv) if a != "-o" and (i == 0 or argv[i - 1] != "-o")]
    trace_digest = None
    if trace.is_file():
        h = hashlib.sha256()
        with trace.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        trace_digest = h.hexdigest()
    return WorkloadDigest(hashlib.sha256(json.dumps(kept).encode()).hexdigest(), trace_digest)


def _trace_rows(trace: Path) -> int | None:
    """How many requests the workload's trace holds (one per non-blank line), when the run still has it."""
    try:
        with trace.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return None


def load_run(path: Path) -> SavedRun:
    if not path.is_dir():
        raise ConfigError(f"{path}: not a run directory")
    plan = _read_json(path / "plan.json")
    try:
        workloads = {w["name"]: w for w in plan["workloads"]}
        planned = [Trial(**t) for t in plan["trials"]]
        arms = tuple(plan["arms"])
        engine = str(plan["engine"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path / 'plan.json'}: not a hybridbench plan ({type(exc).__name__}: {exc})") from None
    config = plan.get("config") or {}
    digests = {}
    for name, w in workloads.items():
        # Traces live under the run dir; a moved or copied run still finds its own.
        trace = path / "traces" / Path(str(w.get("trace_path", f"{name}.jsonl"))).name
        digests[name] = _digest(trace, [str(a) for a in w.get("argv", [])])
    by_trial: dict[str, list[Record]] = defaultdict(list)
    for rec in read_records(path / "records.jsonl"):
        by_trial[rec.trial_id].append(rec)
    bundle_path = path / "bundle.json"
    bundle = _read_json(bundle_path) if bundle_path.exists() else {}
    trials_json = bundle.get("trials", [])
    saved = {str(t.get("trial_id")): t for t in trials_json if isinstance(t, dict)} if isinstance(trials_json,
                                                                                                   list) else {}
    infra = {k: str(t["server"].get("infrastructure_error") or "") for k, t in saved.items()
             if isinstance(t.get("server"), dict)}
    rows = {name: _trace_rows(path / "traces" / Path(str(w.get("trace_path", f"{name}.jsonl"))).name)
            for name, w in workloads.items()}
    trials = []
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for t in planned:
        counts[(t.workload, t.arm)] += 1
        recs = by_trial.get(t.trial_id, [])
        entry = saved.get(t.trial_id, {})
        state = str(entry.get("state") or ("engine died" if infra.get(t.trial_id) else "ran"))
        if recs or infra.get(t.trial_id) or state not in ("ran", "not run"):
            count = entry.get("planned_requests")
            trials.append(TrialRecords(t.trial_id, t.arm, t.workload, t.repeat, tuple(recs), infra.get(t.trial_id, ""),
                                       count if isinstance(count, int) else rows.get(t.workload), state))
    model = config.get("model", {}) if isinstance(config.get("model"), dict) else {}
    return SavedRun(
        path=path,
        name=str(plan.get("name", path.name)),
        engine=engine,
        model=str(model.get("name", "")),
        arms=arms,
        workload_digests=digests,
        trials=tuple(trials),
        planned=dict(counts),
        config=config,
        provenance=bundle.get("provenance", {}) if isinstance(bundle.get("provenance"), dict) else {},
        created=str(bundle.get("created") or ""),
    )
