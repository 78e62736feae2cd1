"""``python -m hybridbench.results {index,ls,show,export,history} RESULTS_DIR [filters]``: the results store.

- ``index ROOT``: rewrites ROOT/index.jsonl from every run directory under ROOT (a sweep fanned out to
  several nodes writes its runs into one root; this merges them), one line per skipped directory;
- ``ls ROOT [filters]``: one line per run, newest first;
- ``show RUN_DIR``: a run's key figures per workload and arm, and its checks;
- ``export ROOT -o DIR [filters]``: Parquet files (runs, aggregates, trials, checks, and every request
  record, read in place by DuckDB) for notebooks and other tools.
- ``history ROOT [filters] [--tolerance T] [--json OUT]``: every like-for-like series judged by the PyTorch
  HUD rule, with change points (results/history.py); exit 1 when a series regressed, for the nightly job.
Filters: --experiment --workload --arm --engine --engine-version --model --gpu --branch --pr --sha --since
--until. Exit 2 with one line for bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb

from hybridbench.errors import ConfigError, OneLineParser
from hybridbench.results.history import history, judge_all
from hybridbench.results.index import INDEX_NAME, index_entry
from hybridbench.results.marks import verdict_marks
from hybridbench.results.reader import read_run
from hybridbench.results.redaction import run_secrets, scrub, scrub_frame
from hybridbench.results.store import Filters, Store, load_store
from hybridbench.results.text import visible
from workloads.atomic_file import output_problem, write_text_atomic

__all__ = ["main"]

SHOWN = ("completed", "mean_ttft_ms", "p99_ttft_ms", "request_throughput", "input_throughput", "token_hit_rate")


def _filters(args: argparse.Namespace) -> Filters:
    return Filters(experiment=args.experiment, workload=args.workload, arm=args.arm, engine=args.engine,
                   engine_version=args.engine_version, model=args.model, gpu=args.gpu, branch=args.branch,
                   pr=args.pr, git_sha=args.sha, since=args.since, until=args.until)


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m hybridbench.results", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("index", "ls", "show", "export", "history"):
        s = sub.add_parser(name)
        s.add_argument("root", type=Path, help="a results root (index, ls, export) or one run directory (show)")
        if name in ("ls", "export", "history"):
            for flag in ("experiment", "workload", "arm", "engine", "engine-version", "model", "gpu", "branch",
                         "pr", "sha", "since", "until"):
                s.add_argument(f"--{flag}", default="")
        if name == "export":
            s.add_argument("-o", "--out", required=True, help="the folder (created with its parents when missing)")
        if name == "history":
            s.add_argument("--tolerance", type=float, default=0.10, help="relative change that violates (0.10)")
            s.add_argument("--window", type=int, default=5, help="baseline points (5)")
            s.add_argument("--json", help="write the verdicts to this file (machine-readable)")
    return p


def _skipped(store: Store) -> None:
    for line in store.skipped:
        print(visible(line), file=sys.stderr)
    if not store.loaded:  # a new or emptied store is a normal state: said once, exit 0
        print(f"{visible(store.root)}: no readable runs yet ({len(store.skipped)} skipped)", file=sys.stderr)


def _index(root: Path) -> int:
    store = load_store(root)
    _skipped(store)
    lines = [json.dumps(index_entry(run.path, run.bundle.raw), sort_keys=True, default=str)
             for run in store.loaded.values() if run.bundle is not None]
    write_text_atomic(root / INDEX_NAME, "".join(f"{ln}\n" for ln in sorted(lines)))
    print(f"{root / INDEX_NAME}: {len(lines)} run(s), {len(store.skipped)} skipped")
    return 0


def _ls(args: argparse.Namespace) -> int:
    store = load_store(args.root)
    _skipped(store)
    runs = store.select(_filters(args))
    for row in runs.to_dict("records"):
        r: dict[str, Any] = {k: visible(v) if isinstance(v, str) else v for k, v in row.items()}
        created = r["created"].strftime("%Y-%m-%d %H:%M") if r["created"] == r["created"] else "-"
        failed = f"({r['failed_checks']}) " if r["failed_checks"] else ""
        marks = f"[{r['marks']}] " if r.get("marks") else ""
        print(f"{created}  {r['verdict']:<12} {marks}{failed}{r['experiment']:<16} {r['engine']} "
              f"{r['engine_version']:<14} {r['model']:<20} {r['gpu']:<22} {r['branch']:<9} {r['git_sha'][:10]:<10} "
              f"{r['run']}")
    print(f"{len(runs)} run(s)", file=sys.stderr)
    return 0


def _show(run_dir: Path) -> int:
    run = read_run(run_dir)
    if run.bundle is None:
        raise ConfigError(f"{run_dir}: no bundle.json (the run did not finish)")
    b = run.bundle
    secrets = run_secrets(run)  # an old run may hold a secret in a check's detail, written before redaction

    def v(text: object) -> str:
        return visible(scrub(str(text), secrets))

    marks = verdict_marks(run)
    marked = f" [{v('; '.join(marks))}]" if marks else ""
    print(f"{v(b.name)}: verdict {v(b.verdict)}{marked}; engine {v(b.provenance.engine.name)} "
          f"{v(b.provenance.engine.version)}; git {v(b.provenance.git_sha[:12]) or 'n/a'}; {b.created}")
    for workload, arms in b.aggregates.items():
        print(f"\n{v(workload)}")
        print("  " + f"{'arm':<22}" + "".join(f"{k:>20}" for k in SHOWN))
        for arm, summary in arms.items():
            cells = [summary.get(k) for k in SHOWN]
            print("  " + f"{v(arm):<22}" + "".join(f"{c:>20.4g}" if isinstance(c, float) else f"{v(c):>20}"
                                                     for c in cells))
    print()
    for c in b.checks:
        print(f"{v(c.status):<12} {v(c.check):<16} {v(c.workload):<24} {v(c.arm):<16} {v(c.detail)}")
    return 0


def _sql_path(path: Path) -> str:
    """A quoted SQL string literal (COPY ... TO takes no bound parameter for its file)."""
    return "'" + str(path).replace("'", "''") + "'"


def _export(args: argparse.Namespace) -> int:
    store = load_store(args.root)
    _skipped(store)
    f = _filters(args)
    args.out.mkdir(parents=True, exist_ok=True)
    selected = store.select(f)
    keep = list(selected["run"])
    secrets = store.secrets
    # Written beside, moved in only once every file is: a failure half-way left some files of this export next to
    # an older one's (runs of one selection, records of another).
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=args.out))
    try:
        with store.connect() as con:
            con.register("selected", scrub_frame(selected, secrets))
            con.execute(f"COPY selected TO {_sql_path(tmp / 'runs.parquet')} (FORMAT parquet)")
            for name in ("aggregates", "trials", "checks"):
                con.register(f"{name}_sel", scrub_frame(store.restrict(getattr(store, name), f), secrets))
                con.execute(f"COPY {name}_sel TO {_sql_path(tmp / (name + '.parquet'))} (FORMAT parquet)")
            records = [str(Path(store.loaded[k].path) / "records.jsonl") for k in keep  # published runs: none
                       if k in store.loaded and (Path(store.loaded[k].path) / "records.jsonl").is_file()]
            if records:
                # DuckDB reads every run's records in place (each already read through the bounded reader);
                # fields added by later schema versions are unioned. Text columns are masked before writing.
                rel = con.execute("SELECT * FROM read_json(?, format='newline_delimited', union_by_name=true, "
                                  "filename=true)", [records])
                con.register("records_sel", scrub_frame(rel.df(), secrets))
                con.execute(f"COPY records_sel TO {_sql_path(tmp / 'records.parquet')} (FORMAT parquet)")
        for name in EXPORTED:
            if (tmp / name).exists():
                os.replace(tmp / name, args.out / name)
            else:  # none this time: an older export's would pair with the wrong runs
                (args.out / name).unlink(missing_ok=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.out}: {len(keep)} run(s) exported")
    return 0


EXPORTED = ("runs.parquet", "aggregates.parquet", "trials.parquet", "checks.parquet", "records.parquet")


def _history(args: argparse.Namespace) -> int:
    if not (0 < args.tolerance < 10) or args.window < 2:
        raise ConfigError("--tolerance must be in (0, 10) and --window >= 2")
    store = load_store(args.root)
    _skipped(store)
    # The nightly series are main's; a pull request's run is judged by compare, not by the trend.
    f = replace(_filters(args), branch=args.branch or "main")
    keep = set(store.select(f)["run"])
    # the typed runs go along: history reads each workload's trace digest from them
    sub = Store(store.root, store.runs[store.runs["run"].isin(keep)], store.restrict(store.aggregates, f),
                store.trials, store.checks, loaded=store.loaded)
    verdicts = judge_all(history(sub), tolerance=args.tolerance, window=args.window)
    for v in verdicts:
        k = v.key
        cps = f"; change points at {', '.join(v.change_points)}" if v.change_points else ""
        print(visible(scrub(f"{v.status:<18} {k.experiment}/{k.workload}/{k.arm} {k.metric} ({k.model}, {k.gpu}, "
                            f"{k.engine}): {v.detail}{cps}", store.secrets)))
    if args.json:
        write_text_atomic(args.json, scrub(json.dumps({"tolerance": args.tolerance, "window": args.window,
                                                       "series": [v.to_json() for v in verdicts]}, indent=1),
                                           store.secrets) + "\n")
    regressed = [v for v in verdicts if v.status == "regression"]
    # A latest night whose figure is not a number measured nothing: not "ok", and the nightly job hears of it.
    no_data = [v for v in verdicts if v.status == "no data"]
    undecided = [v for v in verdicts if v.status == "inconclusive"]  # a trailing set astride the tolerance
    # Too few points to judge: a new store, or a sizing change on main (its nights are judged only among themselves).
    young = [v for v in verdicts if v.status == "insufficient data"]
    resized = sum(1 for v in young if v.unjudged_after_resize)
    reloaded = sum(1 for v in young if v.unjudged and not v.unjudged_after_resize)
    print(f"{len(verdicts)} series, {len(regressed)} regressed, {len(undecided)} inconclusive, {len(no_data)} without "
          f"data on their latest run, {len(young)} with too few points to judge ({resized} after a sizing change, "
          f"{reloaded} after a load, GPU, model or engine change)", file=sys.stderr)
    # A series main's sizing change left without a baseline was judged before and is not now: exit 0 read "no
    # regression" for nights nobody judged, and slower code landing with the change became the new baseline. A
    # series too young to have a baseline at all (a new store, arm or load added) has no earlier main to regress
    # from; one that replaced a judged series on main (another load, trace, GPU, model or engine) is held as a resized
    # one is. An undecided trailing set is never a pass.
    return 1 if regressed or no_data or undecided or resized or reloaded else 0


def _check_output(args: argparse.Namespace) -> None:
    """export's -o folder and history's --json file checked before any run is read; then as paths."""
    for flag, dest, folder in (("-o", "out", True), ("--json", "json", False)):
        given = getattr(args, dest, None)
        if given is None:
            continue
        if problem := output_problem(given, folder=folder):
            raise ConfigError(f"{flag}: {problem}")
        setattr(args, dest, Path(given))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command in ("ls", "export", "history"):
            _filters(args).where()  # a bad --since/--until is its one line, not after a line per skipped run
        _check_output(args)
        if args.command == "index":
            return _index(args.root)
        if args.command == "ls":
            return _ls(args)
        if args.command == "show":
            return _show(args.root)
        if args.command == "history":
            return _history(args)
        return _export(args)
    except ConfigError as exc:
        print(f"error: {visible(exc)}", file=sys.stderr)
        return 2
    except (OSError, duckdb.Error) as exc:
        print(f"error: {visible(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}", file=sys.stderr)
        return 2
