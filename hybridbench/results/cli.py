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
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import duckdb

from hybridbench.errors import ConfigError
from hybridbench.results.history import history, judge
from hybridbench.results.index import INDEX_NAME, index_entry
from hybridbench.results.reader import read_run
from hybridbench.results.store import Filters, Store, load_store
from workloads.atomic_file import write_text_atomic

__all__ = ["main"]

SHOWN = ("completed", "mean_ttft_ms", "p99_ttft_ms", "request_throughput", "input_throughput", "token_hit_rate")


def _filters(args: argparse.Namespace) -> Filters:
    return Filters(experiment=args.experiment, workload=args.workload, arm=args.arm, engine=args.engine,
                   engine_version=args.engine_version, model=args.model, gpu=args.gpu, branch=args.branch,
                   pr=args.pr, git_sha=args.sha, since=args.since, until=args.until)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hybridbench.results", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("index", "ls", "show", "export", "history"):
        s = sub.add_parser(name)
        s.add_argument("root", type=Path, help="a results root (index, ls, export) or one run directory (show)")
        if name in ("ls", "export", "history"):
            for flag in ("experiment", "workload", "arm", "engine", "engine-version", "model", "gpu", "branch",
                         "pr", "sha", "since", "until"):
                s.add_argument(f"--{flag}", default="")
        if name == "export":
            s.add_argument("-o", "--out", type=Path, required=True)
        if name == "history":
            s.add_argument("--tolerance", type=float, default=0.10, help="relative change that violates (0.10)")
            s.add_argument("--window", type=int, default=5, help="baseline points (5)")
            s.add_argument("--json", type=Path, help="write the verdicts here (machine-readable)")
    return p


def _skipped(store: Store) -> None:
    for line in store.skipped:
        print(line, file=sys.stderr)


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
    for r in runs.to_dict("records"):
        created = r["created"].strftime("%Y-%m-%d %H:%M") if r["created"] == r["created"] else "-"
        failed = f"({r['failed_checks']}) " if r["failed_checks"] else ""
        print(f"{created}  {r['verdict']:<12} {failed}{r['experiment']:<16} {r['engine']} {r['engine_version']:<14} "
              f"{r['model']:<20} {r['gpu']:<22} {r['branch']:<9} {r['git_sha'][:10]:<10} {r['run']}")
    print(f"{len(runs)} run(s)", file=sys.stderr)
    return 0


def _show(run_dir: Path) -> int:
    run = read_run(run_dir)
    if run.bundle is None:
        raise ConfigError(f"{run_dir}: no bundle.json (the run did not finish)")
    b = run.bundle
    print(f"{b.name}: verdict {b.verdict}; engine {b.provenance.engine.name} {b.provenance.engine.version}; "
          f"git {b.provenance.git_sha[:12] or 'n/a'}; {b.created}")
    for workload, arms in b.aggregates.items():
        print(f"\n{workload}")
        print("  " + f"{'arm':<22}" + "".join(f"{k:>20}" for k in SHOWN))
        for arm, summary in arms.items():
            cells = [summary.get(k) for k in SHOWN]
            print("  " + f"{arm:<22}" + "".join(f"{v:>20.4g}" if isinstance(v, float) else f"{v!s:>20}"
                                                  for v in cells))
    print()
    for c in b.checks:
        print(f"{c.status:<12} {c.check:<16} {c.workload:<24} {c.arm:<16} {c.detail}")
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
    with store.connect() as con:
        con.register("selected", selected)
        con.execute(f"COPY selected TO {_sql_path(args.out / 'runs.parquet')} (FORMAT parquet)")
        for name in ("aggregates", "trials", "checks"):
            con.register(f"{name}_sel", store.restrict(getattr(store, name), f))
            con.execute(f"COPY {name}_sel TO {_sql_path(args.out / (name + '.parquet'))} (FORMAT parquet)")
        records = [str(Path(store.loaded[k].path) / "records.jsonl") for k in keep
                   if k in store.loaded and (Path(store.loaded[k].path) / "records.jsonl").is_file()]  # published: none
        if records:
            # DuckDB reads every run's records in place; fields added by later schema versions are unioned.
            con.execute("COPY (SELECT * FROM read_json(?, format='newline_delimited', union_by_name=true, "
                        f"filename=true)) TO {_sql_path(args.out / 'records.parquet')} (FORMAT parquet)", [records])
    print(f"{args.out}: {len(keep)} run(s) exported")
    return 0


def _history(args: argparse.Namespace) -> int:
    if not (0 < args.tolerance < 10) or args.window < 2:
        raise ConfigError("--tolerance must be in (0, 10) and --window >= 2")
    store = load_store(args.root)
    _skipped(store)
    # The nightly series are main's; a pull request's run is judged by compare, not by the trend.
    f = replace(_filters(args), branch=args.branch or "main")
    keep = set(store.select(f)["run"])
    sub = Store(store.root, store.runs[store.runs["run"].isin(keep)], store.restrict(store.aggregates, f),
                store.trials, store.checks)
    verdicts = [judge(s, tolerance=args.tolerance, window=args.window) for s in history(sub)]
    for v in verdicts:
        k = v.key
        cps = f"; change points at {', '.join(v.change_points)}" if v.change_points else ""
        print(f"{v.status:<18} {k.experiment}/{k.workload}/{k.arm} {k.metric} ({k.model}, {k.gpu}, {k.engine}): "
              f"{v.detail}{cps}")
    if args.json:
        write_text_atomic(args.json, json.dumps({"tolerance": args.tolerance, "window": args.window,
                                                 "series": [v.to_json() for v in verdicts]}, indent=1) + "\n")
    regressed = [v for v in verdicts if v.status == "regression"]
    print(f"{len(verdicts)} series, {len(regressed)} regressed", file=sys.stderr)
    return 1 if regressed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command in ("ls", "export", "history"):
            _filters(args).where()  # a bad --since/--until is its one line, not after a line per skipped run
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
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, duckdb.Error) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
