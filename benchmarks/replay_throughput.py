"""Replay throughput of every policy, in input tokens per CPU second on one core.

Generates SWE-bench-like agent traces with ``python -m workloads.generate swebench`` (sessions × each
scale: by default 10 and 100 sessions, i.e. 1x and 10x), replays each under every policy with a fixed
byte capacity, the policies in turn ``--repeats`` times, and prints a Markdown table of medians (the
docs/evidence/performance.md's "Trace replay" table comes from it). Times are CPU seconds of the replaying process
(``time.process_time``: what a replay costs on one core, robust to other jobs on a shared machine);
the table also gives the wall seconds of the median run. Each trace ends with the lifecycle replay's
target (``lru``/``seglen``: at least 2M input tokens per CPU second), met or not.

With ``--baseline-src DIR`` (the tree of an earlier commit, e.g. ``git archive REV | tar -x -C DIR``)
the lifecycle policies are also replayed by that code and by this one, each run in its own child
process (``PYTHONPATH`` = the checkout), alternately, and the ratio of median CPU seconds is printed.
Wall time is measured here, in a benchmark, never in a test.

Inner loop: the table times ``replay_rows`` on rows already in memory. The headline figures, whole
``python -m reference_impl.replay`` commands (trace reading included) against a baseline with verdicts, are
``benchmarks/whole_commands.py --only replay``.

    python benchmarks/replay_throughput.py [--sessions 100] [--scales 0.1,1] [--capacity-bytes 4e10] \\
        [--repeats 3] [--baseline-src DIR]
"""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from whole_command import count, folder, positive  # a sibling: run as a script

from hybridbench.errors import OneLineParser
from reference_impl.models import get_model
from reference_impl.policies.registry import POLICIES, make_replay_cache
from reference_impl.replay.api import ReplayConfig
from reference_impl.replay.run import ReplayResult, replay_rows
from workloads.trace import TraceRow, read_trace

LIFECYCLE = ("lru", "seglen")  # SGLang's tree under a lifecycle model: the issue-18 target applies to these
TARGET_TOKENS_PER_S = 2_000_000


def generate(path: Path, sessions: int, seed: int) -> None:
    subprocess.run(
        [
            sys.executable, "-m", "workloads.generate", "swebench",
            "--num-sessions", str(sessions), "--vocab-size", "32000", "--seed", str(seed), "-o", str(path),
        ],
        check=True,
    )  # fmt: skip


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def replay_once(name: str, rows: Sequence[TraceRow], capacity: int, strategy: str) -> tuple[ReplayResult, float, float]:
    """One replay on a fresh cache: the result, its CPU seconds and its wall seconds."""
    model = get_model("marconi-7b")
    config = ReplayConfig(capacity_bytes=capacity, model=model, strategy=strategy)  # type: ignore[arg-type]
    cache = make_replay_cache(name, config)
    cpu, wall = time.process_time(), time.perf_counter()
    result = replay_rows(name, rows, cache, model)
    return result, time.process_time() - cpu, time.perf_counter() - wall


def child(trace: Path, name: str, capacity: int, strategy: str) -> int:
    """``--child``: replay once with whatever code PYTHONPATH points at; print one JSON line."""
    rows = read_trace(trace).rows
    gc.collect()
    gc.freeze()
    result, cpu, _ = replay_once(name, rows, capacity, strategy)
    print(json.dumps({"cpu": cpu, "hit_tokens": result.hit_tokens, "input_tokens": result.input_tokens}))
    return 0


def run_child(src: Path, trace: Path, name: str, capacity: int, strategy: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    args = ["--child", str(trace), name, str(capacity), strategy]
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args], env=env, check=True, capture_output=True, text=True
    )
    parsed: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return parsed


@dataclass(frozen=True)
class Setup:
    capacity: int
    strategy: str
    repeats: int


def compare_baseline(baseline: Path, trace: Path, label: str, requests: int, setup: Setup) -> None:
    """Lifecycle policies, this code against ``baseline``, alternating child processes."""
    here = Path(__file__).resolve().parents[1]
    for name in LIFECYCLE:
        runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for _ in range(setup.repeats):
            for key, src in (("before", baseline), ("after", here)):
                runs[key].append(run_child(src, trace, name, setup.capacity, setup.strategy))
        before = statistics.median(r["cpu"] for r in runs["before"])
        after = statistics.median(r["cpu"] for r in runs["after"])
        hits = {r["hit_tokens"] for rs in runs.values() for r in rs}
        tokens = runs["after"][0]["input_tokens"]
        print(
            f"| {name} | {label} | {before:.2f} | {after:.2f} "
            f"| {before / requests * 1e3:.2f} → {after / requests * 1e3:.2f} | {before / after:.2f}× "
            f"| {tokens / after / 1e6:.1f}M | {'yes' if len(hits) == 1 else 'NO'} |",
            flush=True,
        )


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:
        return child(Path(argv[1]), argv[2], int(argv[3]), argv[4])
    ap = OneLineParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sessions", type=count(1), default=100)
    ap.add_argument("--scales", default="0.1,1", help="multiples of --sessions to generate")
    ap.add_argument("--capacity-bytes", type=positive, default=4e10)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--strategy", default="no_buffer", choices=["no_buffer", "extra_buffer"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=count(1), default=3, help="replays of each policy, in turn (medians)")
    ap.add_argument("--baseline-src", type=folder, help="checkout of an earlier commit to compare lru/seglen with")
    args = ap.parse_args(argv)
    policies = args.policies.split(",")
    if unknown := sorted(set(policies) - set(POLICIES)):
        ap.error(f"--policies: unknown {', '.join(unknown)} (choose from {', '.join(POLICIES)})")
    if args.baseline_src is not None and not (args.baseline_src / "reference_impl").is_dir():
        ap.error(f"argument --baseline-src: {args.baseline_src}: not a checkout (no reference_impl/ in it)")
    try:
        scales = [float(x) for x in args.scales.split(",")]
    except ValueError:
        ap.error(f"--scales {args.scales!r}: expected comma-separated numbers, e.g. 0.1,1")
    if not all(x > 0 for x in scales):
        ap.error(f"argument --scales: every multiple must be positive, got {args.scales!r}")
    capacity = int(args.capacity_bytes)
    setup = Setup(capacity, args.strategy, args.repeats)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f} at start")
    print(f"capacity {args.capacity_bytes:g} B, model marconi-7b, strategy {args.strategy} (lru/seglen)")
    print(f"CPU s: medians of {args.repeats} replays per policy, the policies in turn")
    print("inner loop: replay_rows on rows in memory; whole commands: benchmarks/whole_commands.py\n")
    print(
        "| policy | trace | requests | input tokens | token hit rate | CPU s | CPU ms/request "
        "| input tokens/CPU s | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    traces: list[tuple[str, Path, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for scale in scales:
            sessions = max(1, round(args.sessions * scale))
            path = Path(tmp) / f"swebench_{sessions}.jsonl"
            generate(path, sessions, args.seed)
            rows = read_trace(path).rows
            gc.collect()
            gc.freeze()  # the trace's millions of long-lived objects: not rescanned inside a timed replay
            runs: dict[str, list[tuple[ReplayResult, float, float]]] = {name: [] for name in policies}
            for _ in range(args.repeats):
                for name in policies:
                    runs[name].append(replay_once(name, rows, capacity, args.strategy))
            verdicts = []
            for name in policies:
                result = runs[name][0][0]
                cpu = statistics.median(r[1] for r in runs[name])
                wall = statistics.median(r[2] for r in runs[name])
                rate = result.input_tokens / cpu if cpu else float("inf")
                print(
                    f"| {name} | {sessions} sessions | {result.num_requests} | {result.input_tokens} | "
                    f"{result.token_hit_rate:.4f} | {cpu:.3f} | {cpu / result.num_requests * 1e3:.3f} | "
                    f"{rate:,.0f} | {wall:.2f} |",
                    flush=True,
                )
                if name in LIFECYCLE:
                    verdicts.append(f"{name} {'met' if rate >= TARGET_TOKENS_PER_S else 'NOT met'} ({rate / 1e6:.1f}M)")
            if verdicts:
                print(f"\ntarget ≥ 2M input tokens per CPU s on {sessions} sessions: {', '.join(verdicts)}\n")
            traces.append((f"{sessions} sessions", path, len(rows)))
            del rows, runs
            gc.unfreeze()
        if args.baseline_src is not None:
            print(f"\nlifecycle replay, {args.baseline_src} (before) against this checkout (after), child processes")
            print(
                "| policy | trace | CPU s before | CPU s after | CPU ms per request "
                "| speed-up | tokens/CPU s after | same hits |"
            )
            print("|---|---|---|---|---|---|---|---|")
            for label, path, requests in traces:
                compare_baseline(args.baseline_src, path, f"{label} ({requests} requests)", requests, setup)
    print(f"\nload average {os.getloadavg()[0]:.1f} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
