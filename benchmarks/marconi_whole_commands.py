"""Issue 26's last Marconi target: every replay policy at least 10x Marconi's simulator, as whole commands.

    python benchmarks/marconi_whole_commands.py --marconi-dir /path/to/marconi --marconi-python /path/to/venv/python \
        [--trace /tmp/hybridbench-bench/seglen.jsonl] [--capacities 4e10,2e9] [--sessions 15] [--repeats 1] \
        [--trace-cache cold,warm]

For each capacity and policy two commands run alternately (``--repeats`` rounds; ``whole_command.alternate``,
``os.wait4``: wall seconds, CPU seconds of the process tree, peak RSS), each from process start to exit, trace
loading and packing included:

* ours: ``python -m reference_impl.replay TRACE --policy P --capacity-bytes C`` (this checkout, this interpreter);
* Marconi's: ``benchmarks/marconi_replay.py TRACE --policy P --capacity-bytes C`` run by ``--marconi-python``
  (an interpreter with Marconi's imports), loading the trace as Marconi's driver does and replaying it through
  Marconi's classes from the checkout ``--marconi-dir`` / ``MARCONI_DIR`` (CC BY-NC: never vendored here).

The Markdown table gives both sides' medians, both token hit rates (printed by the commands, to 4 decimals of a
percent: they must agree, else the row says MISMATCH and the script exits 1), the CPU-seconds ratio and the verdict
(>= 10x meets, else misses). CPU seconds are the robust figure on a shared machine; the machine line and the load
average of each row say how far wall seconds can be trusted.

Ours reads the trace through our trace cache (``workloads/trace_cache.py``); ``--trace-cache`` says in which states
it is measured, a row each: ``cold`` (emptied before every run: the file's first read, parsed and stored) and
``warm`` (stored by an untimed run first: every later command of a study on the same file). Marconi's side has no
cache and parses the file every time, as its driver does.

``--sessions N`` replays a cut of the trace instead: its rows of sessions 0..N-1, in trace order (whole sessions,
written once to ``--dir``), for when Marconi's simulator is too slow or too large on the whole trace.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from trace_cache_runs import MODES, TraceCacheRuns  # siblings: run as a script
from whole_command import Summary, alternate, count, file, git_head, machine, verdict

from hybridbench.errors import OneLineParser
from workloads.atomic_file import atomic_writer

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ("marconi", "sglang_plus", "vllm_plus")
TARGET = 10.0  # issue 26: at least 10x Marconi's simulator
_LINE = re.compile(r"^(token hit rate|requests|alpha)\s+(\S+)\s*$", re.MULTILINE)


def parse(stdout: str) -> dict[str, str]:
    """The lines both commands print (``token hit rate``, ``requests``, ``alpha``) as label -> value; with several
    policy blocks the first wins (each command here replays one policy)."""
    found: dict[str, str] = {}
    for label, value in _LINE.findall(stdout):
        found.setdefault(label, value)
    return found


def agreement(ours: str, theirs: str) -> str:
    """``""`` when the token hit rates (and request counts, and α where printed) agree, else what differs."""
    a, b = parse(ours), parse(theirs)
    if "token hit rate" not in a or "token hit rate" not in b:
        return "MISMATCH: no token hit rate printed"
    diffs = [f"{k} {a.get(k)} / {b.get(k)}" for k in ("token hit rate", "requests", "alpha") if a.get(k) != b.get(k)]
    return "MISMATCH: " + ", ".join(diffs) if diffs else ""


def ratio(ours_cpu: float, theirs_cpu: float) -> float:
    """How many times fewer CPU seconds our command took (inf if ours took none measurable)."""
    return theirs_cpu / ours_cpu if ours_cpu > 0 else float("inf")


def cut_sessions(src: Path, dst: Path, sessions: int) -> tuple[int, int]:
    """Write the metadata line and the rows of sessions ``0..sessions-1`` of ``src`` to ``dst``, in trace order;
    (rows, input tokens) written. Reused when ``dst`` is newer than ``src``."""
    rows = tokens = 0
    fresh = not dst.exists() or dst.stat().st_mtime < src.stat().st_mtime
    # Written whole or not at all: an interrupted cut left a partial file newer than its source, reused next time.
    with src.open() as fh, (atomic_writer(dst) if fresh else open(os.devnull, "w")) as out:
        for n, line in enumerate(fh, 1):
            try:
                obj = json.loads(line)
                session = obj.get("session_id")
                if session is not None and not isinstance(session, int):
                    raise ValueError(f"session_id {session!r}: the cut takes integer sessions")
                if session is not None and session >= sessions:
                    continue
                out.write(line)
                if session is not None:
                    rows += 1
                    tokens += len(obj["input_tokens"])
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ValueError(f"{src}:{n}: {type(exc).__name__}: {exc}") from None
    return rows, tokens


def row(trace: str, capacity: float, policy: str, ours: Summary, theirs: Summary, *, hit: str, mismatch: str,
        load: str, cache: str = "cold") -> str:
    r = ratio(ours.cpu_s, theirs.cpu_s)
    return (f"| {trace} | {capacity:.3g} | {policy} | {cache} "
            f"| {ours.wall_s:.2f} / {ours.cpu_s:.2f} / {ours.peak_rss_mb:.0f} "
            f"| {theirs.wall_s:.2f} / {theirs.cpu_s:.2f} / {theirs.peak_rss_mb:.0f} | {hit} | {r:.1f}× "
            f"| {verdict(r, TARGET, at_least=True)} | {load} |" + (f" {mismatch}" if mismatch else ""))


def main(argv: Sequence[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=Path("/tmp/hybridbench-bench/seglen.jsonl"),
                    help="python -m workloads.generate swebench --preset seglen --vocab-size 151936")
    ap.add_argument("--capacities", default="4e10",
                    help="comma-separated bytes (Marconi's SWE-bench sweep: 4e10..1e11)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--sessions", type=count(0), default=0, help="replay only sessions 0..N-1 (0: the whole trace)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/hybridbench-bench"), help="where session cuts are written")
    ap.add_argument("--repeats", type=count(1), default=1)
    ap.add_argument("--trace-cache", default=",".join(MODES), help="our trace cache's states, a row each: cold, warm")
    ap.add_argument("--marconi-dir", type=Path, default=os.environ.get("MARCONI_DIR"))
    ap.add_argument("--marconi-label", default="", help="Marconi's commit, when --marconi-dir is no git checkout")
    ap.add_argument("--marconi-python", type=file, default=os.environ.get("MARCONI_PYTHON", sys.executable),
                    help="an interpreter with Marconi's imports (numpy, scipy, transformers)")
    args = ap.parse_args(argv)
    policies = args.policies.split(",")
    if unknown := sorted(set(policies) - set(POLICIES)):
        ap.error(f"--policies: unknown {', '.join(unknown)} (choose from {', '.join(POLICIES)})")
    if args.marconi_dir is None or not (args.marconi_dir / "radix_cache_hybrid.py").is_file():
        ap.error("--marconi-dir / MARCONI_DIR: a checkout of Marconi's code (radix_cache_hybrid.py) is needed")
    if not args.trace.is_file():
        ap.error(f"--trace {args.trace}: no such file")
    modes = args.trace_cache.split(",")
    if unknown := sorted(set(modes) - set(MODES)):
        ap.error(f"--trace-cache: unknown {', '.join(unknown)} (choose from {', '.join(MODES)})")
    try:
        capacities = [float(c) for c in args.capacities.split(",")]
    except ValueError:
        capacities = []
    if not capacities or not all(math.isfinite(c) and c > 0 for c in capacities):  # nan, inf, 0: no capacity
        ap.error(f"--capacities {args.capacities}: comma-separated positive numbers of bytes, e.g. 4e10,2e9")
    args.dir = args.dir.absolute()  # the commands' trace cache folders live under it and must be absolute
    if args.dir.exists() and not args.dir.is_dir():
        ap.error(f"--dir {args.dir}: not a folder")
    trace = args.trace
    if args.sessions:
        args.dir.mkdir(parents=True, exist_ok=True)
        trace = args.dir / f"{args.trace.stem}-{args.sessions}sessions.jsonl"
        try:
            n, tokens = cut_sessions(args.trace, trace, args.sessions)
        except ValueError as exc:
            ap.error(f"--trace {exc}")
        label = f"{args.trace.name}, sessions 0..{args.sessions - 1}"
        print(f"trace cut: {trace}: sessions 0..{args.sessions - 1} of {args.trace}, {n} requests, {tokens} input "
              "tokens")
    else:
        label = args.trace.name
    theirs = args.marconi_label or git_head(args.marconi_dir)
    print(f"machine: {machine()}; this checkout {git_head(ROOT)}; Marconi {theirs} "
          f"({args.marconi_dir}, run by {args.marconi_python}); medians of {args.repeats} alternating run(s)\n")
    print("| trace | capacity | policy | our trace cache | ours: wall s / CPU s / peak MB "
          "| Marconi's: wall s / CPU s / peak MB | token hit rate ours / Marconi's | CPU ratio | verdict (>= 10×) "
          "| load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    failed = False
    args.dir.mkdir(parents=True, exist_ok=True)
    for cap in capacities:
        for policy in policies:
            failed |= measure_rows(args, trace, label, cap, policy, modes=modes)
    return 1 if failed else 0


def measure_rows(args: argparse.Namespace, trace: Path, label: str, cap: float, policy: str, *,
                 modes: Sequence[str]) -> bool:
    """Print a row per trace-cache state; True when the two sides' hit rates disagree. Marconi's side, which has no
    cache and takes minutes, runs alternately with ours in the first state only, and its figures stand for all."""
    tail = [str(trace), "--policy", policy, "--capacity-bytes", f"{cap:g}"]
    ours: tuple[Sequence[str], str | None] = ([sys.executable, "-m", "reference_impl.replay", *tail], str(ROOT))
    marconi: tuple[Sequence[str], str | None] = (
        [str(args.marconi_python), str(ROOT / "benchmarks" / "marconi_replay.py"), *tail,
         "--marconi-dir", str(args.marconi_dir)], str(ROOT))
    theirs: tuple[Summary, str] | None = None
    failed = False
    for mode in modes:
        cache = TraceCacheRuns(mode, args.dir)
        sides = {"ours": ours} if theirs is not None else {"ours": ours, "marconi": marconi}
        outputs: dict[str, str] = {}
        try:
            cache.prime("ours", *ours)
            res = alternate(sides, args.repeats, outputs, env_for=cache.env)
        finally:
            cache.clean()
        if theirs is None:
            theirs = (res["marconi"], outputs["marconi"])
        mismatch = agreement(outputs["ours"], theirs[1])
        failed |= bool(mismatch)
        hit = f"{parse(outputs['ours']).get('token hit rate')} / {parse(theirs[1]).get('token hit rate')}"
        load = machine().split("load average ")[1].split(",")[0]
        print(row(label, cap, policy, res["ours"], theirs[0], hit=hit, mismatch=mismatch, load=load, cache=mode),
              flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
