"""Hand-made hostile and damaged run directories for the red-team tier, each a copy of a real saved sim run
(tests/hybridbench/fixtures/runs/fbde869-smoke-sim) with one thing changed, and the CLIs driven as a user would."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "hybridbench" / "fixtures" / "runs" / "fbde869-smoke-sim"
T0 = datetime(2026, 11, 1, 3, 0, tzinfo=timezone.utc)
XSS = '<img src=x onerror="window.__pwned=1;fetch(\'http://127.0.0.1:9/leak\')">'
SCRIPT = "<script>window.__pwned=2</script>"

Edit = Callable[[dict[str, Any]], None]


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def save(path: Path, data: object) -> None:
    path.write_text(json.dumps(data))


def make_run(root: Path, name: str, *, night: int = 0, bundle: Edit | None = None, plan: Edit | None = None,
             source: Path = FIXTURE) -> Path:
    """A copy of the saved run ``source`` at ``root/name``: its own run id, created ``night`` days after T0, then
    edited."""
    run = root / name
    run.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, run)
    b = load(run / "bundle.json")
    b["run_id"] = uuid.uuid4().hex
    b["created"] = (T0 + timedelta(days=night)).isoformat()
    if bundle is not None:
        bundle(b)
    save(run / "bundle.json", b)
    if plan is not None:
        p = load(run / "plan.json")
        plan(p)
        save(run / "plan.json", p)
    return run


def set_metric(value: float, metric: str = "mean_ttft_ms") -> Edit:
    def edit(b: dict[str, Any]) -> None:
        for arms in b["aggregates"].values():
            for summary in arms.values():
                summary[metric] = value
    return edit


_MAIN = {"hybridbench.results": "hybridbench.results.cli", "hybridbench.dashboard": "hybridbench.dashboard.cli",
         "hybridbench.compare": "hybridbench.compare.__main__", "hybridbench.rescore": "hybridbench.rescore.__main__"}


class Hung(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise Hung("the command did not finish in time")


def cli(module: str, *args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` run in this process (one import of pandas/duckdb/plotly for the whole tier,
    not one per call); a hang is a failure within ``timeout`` seconds (SIGALRM), an escaping exception is
    the traceback the user would have seen, and fails the test."""
    main = importlib.import_module(_MAIN[module]).main
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(timeout))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main([str(a) for a in args])
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return subprocess.CompletedProcess([module, *map(str, args)], rc, out.getvalue(), err.getvalue())


def subprocess_cli(module: str, *args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The same as a separate process (what CI runs), for the cases that need one."""
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=ROOT)


def clean(proc: subprocess.CompletedProcess[str]) -> None:
    """No traceback, no DuckDB binder text, no raw escape character on either stream."""
    both = proc.stdout + proc.stderr
    for bad in ("Traceback", "Binder Error", "KeyError", "RecursionError", "MemoryError", "\x1b"):
        assert bad not in both, (bad, proc.stderr[-2000:])


def second_repeat(run: Path, stretch: float = 1.01) -> Path:
    """``run`` (the one-repeat fixture's copy) with a second repeat: each trial again as repeat 1 under the next
    index, its records copied with every time ``stretch``-ed, so both sides of a comparison have a spread."""
    plan, bundle = load(run / "plan.json"), load(run / "bundle.json")
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines() if line.strip()]
    ids = {}
    for t in list(plan["trials"]):
        again = {**t, "index": t["index"] + len(plan["trials"]), "repeat": 1}
        old, new = (f"{x['index']:03d}-{x['workload']}-{x['arm']}-r{x['repeat']}" for x in (t, again))
        ids[old] = new
        plan["trials"].append(again)
        bundle["trials"].append({**next(b for b in bundle["trials"] if b["trial_id"] == old), "trial_id": new,
                                 "repeat": 1})
    for r in [r for r in records if r["trial_id"] in ids]:
        times = {k: r[k] * stretch for k in ("sent_s", "first_token_s", "end_s") if r.get(k) is not None}
        records.append({**r, **times, "trial_id": ids[r["trial_id"]], "repeat": 1})
    plan["config"]["repeats"] = 2
    save(run / "plan.json", plan)
    save(run / "bundle.json", bundle)
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run
