"""The results store: every run directory under a results root, read through the typed reader into pandas
frames and queried in place with DuckDB. The run directories stay the source of truth; nothing is copied
unless ``export`` writes Parquet.

Frames (one row each):
- ``runs``: a run (experiment, engine and version, model, GPU, branch/PR, git sha, date, verdict, fingerprint);
- ``aggregates``: a (run, workload, arm, metric) value from bundle.json's per-arm aggregates;
- ``trials``: a (run, trial) summary value, for distributions over repeats;
- ``checks``: a verdict line.
A run directory that cannot be read (no bundle yet, a corrupt file, a newer schema) is reported in one line
and skipped, never fatal: a nightly store must survive one bad night.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from hybridbench.errors import ConfigError
from hybridbench.plan.types import MODELLED_ENGINES
from hybridbench.results.baselines import published_rows
from hybridbench.results.reader import read_run
from hybridbench.results.types import Run

__all__ = ["Filters", "Store", "find_run_dirs", "latest_passing_main", "load_fingerprint", "load_store", "run_row"]

MAX_DEPTH = 6  # results/multirun/<date>/<time>/<job>/: a sweep's runs sit a few levels down


def find_run_dirs(root: Path) -> Iterator[Path]:
    """Directories holding a plan.json, at most MAX_DEPTH below ``root`` (the root itself may be a run)."""
    if (root / "plan.json").is_file():
        yield root
        return
    frontier = [root]
    for _ in range(MAX_DEPTH):
        nxt = []
        for d in frontier:
            try:
                children = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            for c in children:
                if (c / "plan.json").is_file():
                    yield c
                else:
                    nxt.append(c)
        frontier = nxt


def _engine_version(run: Run) -> str:
    return run.bundle.provenance.engine.version if run.bundle is not None else ""


def _gpu(run: Run) -> str:
    """The GPUs nvidia-smi named for the server, else the modelled one (sim), else none (CPU engines)."""
    if run.bundle is not None:
        names = run.bundle.provenance.engine.extra.get("gpus")
        if isinstance(names, list) and names:
            return f"{len(names)}x {names[0]}"
    engine = run.plan.config.get("engine", {})
    if run.plan.engine == "sim" and isinstance(engine, Mapping):
        return f"{engine.get('tp', 1)}x {engine.get('gpu', '')} (modelled)"
    return "cpu"


def load_fingerprint(run: Run) -> str:
    """What the load was, independent of where it ran: each workload's generator arguments (without the
    output path), the load settings and the seed. Runs with the same one sent the same requests the same way;
    the plan's own fingerprint also covers the engine's settings and the run directory."""
    body = {
        "workloads": [(w.name, w.kind, [a for i, a in enumerate(w.argv) if "-o" not in (a, w.argv[i - 1] if i else "")])
                      for w in run.plan.workloads],
        "load": run.plan.config.get("load"),
        "seed": run.plan.config.get("seed"),
    }
    # A workload's own Poisson rate is part of its load; only when set, so runs without one keep their key.
    workloads = run.plan.config.get("workloads")
    rates = {name: w["request_rate"] for name, w in workloads.items()
             if isinstance(w, dict) and w.get("request_rate")} if isinstance(workloads, dict) else {}
    if rates:
        body["request_rates"] = rates
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_row(run: Run, root: Path) -> dict[str, Any]:
    b = run.bundle
    prov = b.provenance if b is not None else None
    pr = prov.pr_number if prov is not None else None
    try:
        rel = str(run.path.resolve().relative_to(root.resolve()))
    except ValueError:
        rel = str(run.path)
    return {
        "run": rel,
        "path": str(run.path),
        "experiment": run.plan.name,
        "created": pd.Timestamp(b.created) if b is not None and b.created else pd.NaT,
        "verdict": b.verdict if b is not None else "unfinished",
        "failed_checks": ", ".join(sorted({c.check for c in b.checks if c.status in ("fail", "inconclusive")}))
        if b else "",
        "engine": run.plan.engine,
        "engine_version": _engine_version(run),
        "model": run.plan.model,
        "gpu": _gpu(run),
        "pr": str(pr) if pr else "",
        "branch": f"pr-{pr}" if pr else "main",
        "git_sha": prov.git_sha if prov is not None else "",
        "fingerprint": run.plan.fingerprint,
        "load": load_fingerprint(run),
        "arms": ",".join(run.plan.arms),
        "workloads": ",".join(w.name for w in run.plan.workloads),
        "modelled": bool(b.modelled) if b is not None else run.plan.engine in MODELLED_ENGINES,
        "schema_version": b.schema_version if b is not None else run.plan.schema_version,
    }


def _numbers(summary: Mapping[str, Any]) -> Iterator[tuple[str, float]]:
    for k, v in summary.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            continue
        yield k, float(v)


@dataclass(frozen=True, slots=True)
class Filters:
    """Row filters on the runs frame; empty fields match everything."""

    experiment: str = ""
    workload: str = ""
    arm: str = ""
    engine: str = ""
    engine_version: str = ""
    model: str = ""
    gpu: str = ""
    branch: str = ""  # main, or pr-<N>
    pr: str = ""
    git_sha: str = ""  # a prefix
    since: str = ""  # ISO date or time
    until: str = ""

    def where(self) -> tuple[str, list[Any]]:
        """A DuckDB WHERE clause over ``runs`` (with bound parameters, never string-pasted values)."""
        clauses, params = [], []
        for name in ("experiment", "engine", "engine_version", "model", "gpu", "branch", "pr"):
            value = getattr(self, name)
            if value:
                clauses.append(f"{name} = ?")
                params.append(value)
        if self.git_sha:
            clauses.append("starts_with(git_sha, ?)")
            params.append(self.git_sha)
        for name, op in (("since", ">="), ("until", "<=")):
            value = getattr(self, name)
            if value:
                try:
                    stamp = pd.Timestamp(value)
                except ValueError:
                    raise ConfigError(f"--{name}: not a date or time: {value!r}") from None
                clauses.append(f"created {op} ?")
                params.append((stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp).to_pydatetime())
        for name in ("workload", "arm"):
            value = getattr(self, name)
            if value:
                clauses.append(f"list_contains(string_split({name}s, ','), ?)")
                params.append(value)
        return (" AND ".join(clauses) or "TRUE"), params


@dataclass
class Store:
    root: Path
    runs: pd.DataFrame
    aggregates: pd.DataFrame
    trials: pd.DataFrame
    checks: pd.DataFrame
    skipped: list[str] = field(default_factory=list)  # one line per unreadable run directory
    loaded: dict[str, Run] = field(default_factory=dict)  # run (relative path) -> the typed run

    def connect(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        for name in ("runs", "aggregates", "trials", "checks"):
            con.register(name, getattr(self, name))
        return con

    def select(self, filters: Filters) -> pd.DataFrame:
        """The runs matching ``filters``, newest first."""
        clause, params = filters.where()
        with self.connect() as con:
            return con.execute(f"SELECT * FROM runs WHERE {clause} ORDER BY created DESC NULLS LAST, run",
                               params).df()

    def restrict(self, frame: pd.DataFrame, filters: Filters) -> pd.DataFrame:
        """Rows of a per-run frame whose run matches, and whose workload/arm match when the frame has them."""
        keep = set(self.select(filters)["run"])
        out = frame[frame["run"].isin(keep)]
        for name in ("workload", "arm"):
            value = getattr(filters, name)
            if value and name in out.columns:
                out = out[out[name] == value]
        return out


_RUN_COLUMNS = [f.name for f in fields(Filters)]


def _frames(runs: Sequence[Run], root: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    run_rows: list[dict[str, Any]] = []
    agg_rows: list[dict[str, Any]] = []
    trial_rows: list[dict[str, Any]] = []
    check_rows: list[dict[str, Any]] = []
    for run in runs:
        row = run_row(run, root)
        run_rows.append(row)
        key = row["run"]
        if run.bundle is None:
            continue
        for workload, arms in run.bundle.aggregates.items():
            for arm, summary in arms.items():
                agg_rows.extend({"run": key, "workload": workload, "arm": arm, "metric": m, "value": v}
                                for m, v in _numbers(summary))
        for t in run.bundle.trials:
            trial_rows.extend({"run": key, "trial_id": t.trial_id, "workload": t.workload, "arm": t.arm,
                               "repeat": t.repeat, "state": t.state, "metric": m, "value": v}
                              for m, v in _numbers(t.summary))
        check_rows.extend({"run": key, "check": c.check, "workload": c.workload, "arm": c.arm, "status": c.status,
                           "observed": c.observed, "expected": c.expected, "detail": c.detail}
                          for c in run.bundle.checks)

    def frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
        return pd.DataFrame(rows, columns=columns)

    return (
        frame(run_rows, list(run_rows[0]) if run_rows else ["run", *_RUN_COLUMNS]),
        frame(agg_rows, ["run", "workload", "arm", "metric", "value"]),
        frame(trial_rows, ["run", "trial_id", "workload", "arm", "repeat", "state", "metric", "value"]),
        frame(check_rows, ["run", "check", "workload", "arm", "status", "observed", "expected", "detail"]),
    )


def load_store(root: Path, dirs: Iterable[Path] | None = None) -> Store:
    """Every readable run under ``root``; unreadable ones are listed in ``skipped``, one line each."""
    if not root.is_dir():
        raise ConfigError(f"{root}: not a directory of runs")
    runs, skipped = [], []
    for d in dirs if dirs is not None else find_run_dirs(root):
        try:
            run = read_run(d)
        except ConfigError as exc:
            skipped.append(f"skipped {d}: {exc}")
            continue
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            skipped.append(f"skipped {d}: {type(exc).__name__}: {exc}")
            continue
        if run.bundle is None:
            skipped.append(f"skipped {d}: no bundle.json (the run is still going, or was killed before scoring)")
            continue
        runs.append(run)
    r, a, t, c = _frames(runs, root)
    loaded = {str(row["run"]): run for row, run in zip(r.to_dict("records"), runs, strict=True)}
    pub_runs, pub_aggs, pub_skipped = published_rows(root)
    if pub_runs:  # no typed Run behind these: they stay out of ``loaded`` (nothing to show, export or score)
        pub = pd.DataFrame(pub_runs)
        pub["created"] = pd.Series([pd.NaT] * len(pub), dtype="datetime64[ns, UTC]")
        r = pd.concat([r, pub], ignore_index=True) if len(r) else pub
        a = pd.concat([a, pd.DataFrame(pub_aggs, columns=a.columns)], ignore_index=True)
    skipped += pub_skipped
    store = Store(root, r, a, t, c, skipped)
    store.loaded = loaded
    return store


def latest_passing_main(root: Path, candidate: Run) -> Path:
    """The newest run under ``root`` of the candidate's experiment and load (``load_fingerprint``) that ran on main
    (no PR number) and passed: what ``compare latest:ROOT CANDIDATE`` compares against."""
    store = load_store(root)
    runs = store.runs
    mine = str(candidate.path.resolve())
    load = load_fingerprint(candidate)
    pick = runs[(runs["experiment"] == candidate.plan.name) & (runs["load"] == load)
                & (runs["branch"] == "main") & (runs["verdict"] == "pass")
                & (runs["path"].map(lambda p: str(Path(p).resolve())) != mine)]
    if pick.empty:
        raise ConfigError(f"latest:{root}: no passing main run of experiment {candidate.plan.name} with the "
                          f"candidate's load ({load}) among {len(runs)} run(s) there")
    return Path(str(pick.sort_values("created").iloc[-1]["path"]))
