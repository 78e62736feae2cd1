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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from hybridbench.config.comparable_keys import fixed_settings, sizing
from hybridbench.config.gpu_kind import NO_GPU, gpu_kind
from hybridbench.errors import ConfigError
from hybridbench.plan.types import MODELLED_ENGINES
from hybridbench.results.baselines import published_rows
from hybridbench.results.discover import find_run_dirs
from hybridbench.results.marks import complete, verdict_marks
from hybridbench.results.reader import read_run
from hybridbench.results.redaction import run_secrets
from hybridbench.results.types import Run

__all__ = ["Filters", "Store", "find_run_dirs", "latest_passing_main", "load_fingerprint", "load_store", "run_row"]

def _engine_version(run: Run) -> str:
    return run.bundle.provenance.engine.version if run.bundle is not None else ""


# engine.gpu values that name no GPU (config.gpu_kind's, and "" of a run saved without one)
_NO_GPU = frozenset({"", *NO_GPU})


def _gpu(run: Run) -> str:
    """The GPUs nvidia-smi named for the server, else the modelled one (sim), else the configured one marked
    unrecorded (a GPU engine whose nvidia-smi named nothing), else none: a CPU engine's host CPU, "cpu (<model>, <N>
    cores)", or "cpu" for a modelled engine (replay) or a run that recorded no CPU."""
    if names := run.gpus:
        return f"{len(names)}x {names[0]}"
    engine = run.plan.config.get("engine", {})
    if not isinstance(engine, Mapping):
        return "cpu"
    # a run saved before engine.gpu was normalised may hold "H100": the same label (and baseline) as "h100"
    gpu, tp = gpu_kind(engine.get("gpu", "") or ""), engine.get("tp", 1)
    if run.plan.engine == "sim":
        return f"{tp}x {gpu} (modelled)"
    if gpu not in _NO_GPU and run.plan.engine not in MODELLED_ENGINES:
        # A GPU run whose provenance names no GPU was labelled "cpu" and drawn beside CPU runs; marked, it is
        # never another GPU run's baseline either (latest_passing_main matches this label).
        return f"{tp}x {gpu} (unrecorded)"
    # A CPU engine's wall-clock figures are its host's (history's series are the wall clock's, whatever
    # engine.timing judged): two CPUs are two series, and never each other's latest: baseline, as two GPUs are.
    # A modelled engine's are no host's; a run whose bundle recorded no CPU (older ones) stays "cpu".
    host = run.bundle.provenance.cpu if run.bundle is not None else ""
    return f"cpu ({host})" if host and run.plan.engine not in MODELLED_ENGINES else "cpu"


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
        # The reader normalised it to UTC: one dtype for the column, whatever zone each run wrote.
        "created": pd.Timestamp(b.created) if b is not None and b.created else pd.NaT,
        "verdict": b.verdict if b is not None else "unfinished",
        "marks": "; ".join(verdict_marks(run)),
        "complete": complete(run),
        "rescored": b is not None and b.rescored is not None,
        "run_id": b.run_id if b is not None else "",
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
        # The sizing as canonical JSON: history judges a point only against earlier ones sized alike.
        "sizing": json.dumps(sizing(run.plan.config), sort_keys=True, default=str),
        "arms": ",".join(run.plan.arms),
        "workloads": ",".join(w.name for w in run.plan.workloads),
        "modelled": bool(b.modelled) if b is not None else run.plan.engine in MODELLED_ENGINES,
        "schema_version": b.schema_version if b is not None else run.plan.schema_version,
    }


def _numbers(summary: Mapping[str, Any]) -> Iterator[tuple[str, float]]:
    """Each numeric figure; a non-finite one stays, as NaN: that run measured nothing there ("no data"), which
    history must see rather than skip to the night before."""
    for k, v in summary.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue
        yield k, float(v) if math.isfinite(v) else math.nan


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
    secrets: frozenset[str] = frozenset()  # every loaded run's secret values: what no writer may copy out
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


# The runs frame's columns (run_row's keys), so an empty store is a frame of the same shape: DuckDB binds the
# same names whether the store holds no run or a thousand.
RUN_COLUMNS = ["run", "path", "experiment", "created", "verdict", "marks", "complete", "rescored", "run_id",
               "failed_checks", "engine", "engine_version", "model", "gpu", "pr", "branch", "git_sha", "fingerprint",
               "load", "sizing", "arms", "workloads", "modelled", "schema_version"]


def _runs_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=RUN_COLUMNS)
    frame["created"] = pd.to_datetime(frame["created"], utc=True)
    return frame


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
        _runs_frame(run_rows),
        frame(agg_rows, ["run", "workload", "arm", "metric", "value"]),
        frame(trial_rows, ["run", "trial_id", "workload", "arm", "repeat", "state", "metric", "value"]),
        frame(check_rows, ["run", "check", "workload", "arm", "status", "observed", "expected", "detail"]),
    )


def _read(d: Path, root: Path) -> Run | str:
    """The run in ``d``, or the one line saying why it is skipped."""
    try:
        run = read_run(d)
    except ConfigError as exc:
        return f"skipped {d}: {exc}"
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, MemoryError) as exc:
        return f"skipped {d}: {type(exc).__name__}: {str(exc)[:200]}"
    if run.bundle is None:
        return f"skipped {d}: no bundle.json (the run is still going, or was killed before scoring)"
    return run


def load_store(root: Path, dirs: Iterable[Path] | None = None) -> Store:
    """Every readable run under ``root``, each once; unreadable ones are listed in ``skipped``, one line each.
    A run reached again (a copy, by its bundle's run id; a link, by its real path) is a skipped line naming
    the first path."""
    if not root.is_dir():
        raise ConfigError(f"{root}: not a directory of runs")
    runs: list[Run] = []
    skipped: list[str] = []
    first: dict[str, Path] = {}
    for d in dirs if dirs is not None else find_run_dirs(root):
        got = _read(d, root)
        if isinstance(got, str):
            skipped.append(got)
            continue
        assert got.bundle is not None
        key = got.bundle.run_id
        real = str(d.resolve())
        seen = first.get(key) or first.get(real)
        if seen is not None:
            skipped.append(f"skipped {d}: the same run as {seen} (run id {key[:12]}); counted once")
            continue
        first[key] = first[real] = d
        runs.append(got)
    r, a, t, c = _frames(runs, root)
    loaded = {str(row["run"]): run for row, run in zip(r.to_dict("records"), runs, strict=True)}
    pub_runs, pub_aggs, pub_skipped = published_rows(root)
    if pub_runs:  # no typed Run behind these: they stay out of ``loaded`` (nothing to show, export or score)
        pub = pd.DataFrame(pub_runs)
        pub["created"] = pd.Series([pd.NaT] * len(pub), dtype="datetime64[ns, UTC]")
        for name in ("marks", "run_id", "sizing"):  # a published figure's sizing is not recorded: "" (unknown)
            pub[name] = ""
        pub["complete"], pub["rescored"] = True, False
        r = pd.concat([r, pub], ignore_index=True) if len(r) else pub
        a = pd.concat([a, pd.DataFrame(pub_aggs, columns=a.columns)], ignore_index=True)
    skipped += pub_skipped
    store = Store(root, r, a, t, c, skipped)
    store.loaded = loaded
    store.secrets = frozenset().union(*(run_secrets(run) for run in runs))
    return store


def latest_passing_main(root: Path, candidate: Run) -> Path:
    """The newest run under ``root`` of the candidate's experiment and load (``load_fingerprint``), on its GPUs,
    that ran on main (no PR number) and passed with its own verdict, every trial complete (``marks``): what ``compare
    latest:ROOT CANDIDATE`` compares against. A re-scored run, or one that did not complete, is never taken."""
    store = load_store(root)
    runs = store.runs
    mine = str(candidate.path.resolve())
    # the candidate's own copy in the store (the nightly copies its run there) is the same run, never its baseline
    own_id = candidate.bundle.run_id if candidate.bundle is not None else ""
    load = load_fingerprint(candidate)
    gpu = _gpu(candidate)  # a main run on other GPUs is no baseline (compare refuses the pair)
    pick = runs[(runs["experiment"] == candidate.plan.name) & (runs["load"] == load)
                & (runs["branch"] == "main") & (runs["verdict"] == "pass") & (runs["complete"] == True)  # noqa: E712
                & (runs["rescored"] == False) & (runs["marks"] == "")  # noqa: E712
                & (runs["path"].map(lambda p: str(Path(p).resolve())) != mine) & (runs["run_id"] != own_id)]
    # Of those, the newest that compare would take: the same engine, model, checkpoint and sizing (a newer main run
    # at another chunked_prefill_size was picked, then refused, where an older one was a baseline).
    fixed = fixed_settings(candidate.plan.config)
    pick = pick[pick["run"].map(lambda r: fixed_settings(store.loaded[str(r)].plan.config) == fixed)]
    same = pick[pick["gpu"] == gpu] if not pick.empty else pick  # (an empty selection may have lost its columns)
    if same.empty and not pick.empty and gpu.startswith("cpu"):
        # A CPU engine on a runner pool of mixed CPUs: with no main run on this CPU, another CPU's. compare takes
        # the pair and holds what the host decides (wall-clock rows across two CPUs are inconclusive, comparable.py).
        same = pick[pick["gpu"].str.startswith("cpu")]
    pick = same
    if pick.empty:
        raise ConfigError(f"latest:{root}: no passing main run of experiment {candidate.plan.name} with the "
                          f"candidate's load ({load}), engine, model and sizing on its GPUs ({gpu}) among {len(runs)} "
                          "run(s) there (a re-scored or incomplete run is never a baseline)")
    # A run without a time is never "the newest" (NaT sorted last, it was taken over last night's run).
    return Path(str(pick.sort_values(["created", "run"], na_position="first").iloc[-1]["path"]))
