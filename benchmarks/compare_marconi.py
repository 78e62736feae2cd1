"""Differential check of reference_impl.marconi against Marconi's own simulator classes.

Usage::

    MARCONI_DIR=/path/to/marconi/checkout python benchmarks/compare_marconi.py \
        --trace /tmp/swe_synth.jsonl --capacities 2e9,4e9,8e9 [--generate] [--repeats 3]

Marconi's code (github.com/ruipeterpan/marconi, CC BY-NC) is never vendored: point
``--marconi-dir`` / ``MARCONI_DIR`` at a checkout and run this script with an interpreter that
has Marconi's imports (numpy, scipy, transformers, ...). With ``--generate`` (or when the trace
file is missing) a synthetic SWE-bench-like trace is written first.

For each capacity and policy (marconi = their policy version 2 with α tuning, sglang_plus =
version 1, vllm_plus = their vLLM+ class) both simulators replay the same rows, alternately
``--repeats`` times; the script prints a Markdown table of token hit rates side by side, the
median CPU seconds of each (user + system, with reaped child processes: what a replay costs on
one core, robust to other jobs on a shared machine) and their ratio, and exits 1 if any
per-request reused length differs. Each simulator replays the trace as it holds it in memory:
Marconi's as the JSON lists its driver loads, ours as token ids packed into bytes once per trace
and reused by every capacity and policy; that one-time packing is timed and printed separately.
Marconi's tuner breaks exact α ties by worker completion order; the script makes that order the
submission order, i.e. the smallest α wins, which is the rule our tuner documents.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marconi_replay import marconi_tree, replay  # siblings: run as benchmarks/compare_marconi.py
from replay_throughput import machine
from whole_command import count, folder, positive

from hybridbench.errors import OneLineParser
from reference_impl.marconi import MarconiCache, VllmPlusCache
from reference_impl.marconi.tree import pack_request
from reference_impl.models import get_model
from workloads.atomic_file import output_problem
from workloads.trace import TraceError, TraceRow, read_trace, write_trace

POLICIES = ("marconi", "sglang_plus", "vllm_plus")


def cpu_seconds() -> float:
    """CPU of this process (``process_time``, ns resolution) plus its reaped children's: Marconi's α
    tuner runs its 21 replays in a process pool, joined before it returns."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def generate_swebench_like(
    path: Path,
    *,
    sessions: int = 100,
    seed: int = 42,
    max_input: int = 4000,
    max_turns: int = 30,
    sps: float = 1.0,
    art: float = 7.5,
) -> None:
    """SWE-agent-style sessions: shared system prompt, task, (action, observation) rounds,
    observations older than the last five collapsed to a fixed placeholder."""
    rng = random.Random(seed)
    vocab = range(3, 32000)

    def msg(role_tok: int, n: int) -> list[int]:
        # Each message starts like a Llama-tokenized json.dumps(message): BOS, '{"role": "<role>'.
        return [1, 29912, 12406, role_tok, *rng.choices(vocab, k=n)]

    system = msg(1792, 700)
    placeholder = [1, 29912, 12406, 1404, 9552, 1962, 25811]
    rows: list[TraceRow] = []
    for sid in range(sessions):
        ts = sid / sps
        history: list[list[int]] = [system, msg(1404, rng.randint(150, 500))]  # task statement
        observations: list[int] = []  # indices in history of full observations
        for turn in range(rng.randint(5, max_turns)):
            inp = [t for m in history for t in m]
            if len(inp) > max_input:
                break
            out = msg(20255, rng.randint(30, 160))
            rows.append(TraceRow(sid, turn, ts, tuple(inp), tuple(out)))
            history.append(out)
            obs_len = rng.choice([20, 60, 150, 300, 600, 1000])
            history.append(msg(1404, obs_len))
            observations.append(len(history) - 1)
            if len(observations) > 5:  # keep the last five observations in full
                history[observations.pop(0)] = placeholder
            ts += rng.expovariate(1 / art)
    rows.sort(key=lambda r: (r.ts, r.session_id))
    write_trace(path, rows, {"generator": "compare_marconi.generate_swebench_like", "seed": seed, "synthetic": True})


def run_theirs(
    marconi_dir: Path, policy: str, capacity: float, rows: Sequence[dict[str, Any]]
) -> tuple[list[int], float, str]:
    tree = marconi_tree(marconi_dir, policy, capacity)
    t0 = cpu_seconds()
    replay(tree, rows)  # the driver's loop: one copy of how Marconi's requests are fed
    elapsed = cpu_seconds() - t0
    alpha = str(getattr(tree, "eff_weight", "")) if policy == "marconi" else ""
    return [x[2] for x in tree.request_history], elapsed, alpha


def run_ours(policy: str, capacity: int, packed: Sequence[tuple[bytes, int]]) -> tuple[list[int], float, str]:
    """Replay the packed trace (``pack_request`` of every row); CPU seconds."""
    model = get_model("marconi-7b")
    cache: MarconiCache | VllmPlusCache
    if policy == "vllm_plus":
        cache = VllmPlusCache(capacity, model, block_size=32)
    else:
        cache = MarconiCache(capacity, model, eviction=policy, mode="faithful")  # type: ignore[arg-type]
    reused: list[int] = []
    t0 = cpu_seconds()
    for seq, input_len in packed:
        reused.append(cache.lookup_packed(seq, input_len))
        cache.admit_packed(seq, input_len)
    elapsed = cpu_seconds() - t0
    alpha = next((str(v) for k, v in cache.stats().notes if k == "alpha"), "")
    return reused, elapsed, alpha


def main(argv: Sequence[str] | None = None) -> int:
    # Marconi's vLLM+ recurses once per 32-token block; its own driver (policy_exploration.py) raises the
    # limit to 1500 for 32K-token inputs, so do the same before running it.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1500))
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=Path("/tmp/hybridbench_swe_synth.jsonl"))
    ap.add_argument("--capacities", default="2e9,4e9,8e9", help="comma-separated bytes, e.g. 2e9,4e9")
    ap.add_argument("--marconi-dir", type=folder, default=os.environ.get("MARCONI_DIR"))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--repeats", type=count(1), default=3, help="alternating runs of each simulator per cell (medians)")
    ap.add_argument(
        "--once-over-s",
        type=positive,
        default=60.0,
        help="a cell whose first run of Marconi's simulator takes more CPU s than this is not repeated",
    )
    ap.add_argument("--generate", action="store_true", help="(re)generate the synthetic trace")
    ap.add_argument("--sessions", type=count(1), default=100)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--ours-only", action="store_true", help="skip Marconi's simulator (timings only)")
    args = ap.parse_args(argv)
    policies = args.policies.split(",")
    if unknown := sorted(set(policies) - set(POLICIES)):
        ap.error(f"--policies: unknown {', '.join(unknown)} (choose from {', '.join(POLICIES)})")
    try:
        capacities = [int(float(c)) for c in args.capacities.split(",")]
    except ValueError:
        ap.error(f"--capacities {args.capacities!r}: expected comma-separated numbers of bytes, e.g. 2e9,4e9")
    if any(c <= 0 for c in capacities):
        ap.error(f"--capacities {args.capacities!r}: every capacity must be positive")
    if not args.ours_only and args.marconi_dir is None:
        ap.error("set --marconi-dir or MARCONI_DIR (or pass --ours-only)")
    if args.generate or not args.trace.exists():
        if problem := output_problem(args.trace):
            ap.error(f"argument --trace: {problem}")
        generate_swebench_like(args.trace, sessions=args.sessions, seed=args.seed)
    try:
        rows = read_trace(args.trace).rows
    except TraceError as exc:
        ap.error(f"argument --trace: {exc}")
    with args.trace.open() as fh:
        raw = [obj for line in fh if "__trace_metadata__" not in (obj := json.loads(line))]
    total_in = sum(len(r.input_tokens) for r in rows)
    t0 = cpu_seconds()
    packed = [pack_request(r.input_tokens, r.output_tokens) for r in rows]
    t_pack = cpu_seconds() - t0
    # The loaded trace is millions of long-lived objects; keep the cyclic GC from rescanning
    # them inside either simulator's timed loop (same treatment for both).
    gc.collect()
    gc.freeze()
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f} at start")
    print(f"trace {args.trace}: {len(rows)} requests, {total_in} input tokens")
    print(f"packing the trace once (ours, reused by every row below): {t_pack:.3f} CPU s")
    print(
        f"CPU seconds, medians of {args.repeats} alternating runs each (once where theirs > {args.once_over_s:g} s)\n"
    )
    print(
        "| capacity | policy | token hit rate ours / theirs | α ours / theirs "
        "| ours CPU s | theirs CPU s | speed-up | runs |"
    )
    print("|---|---|---|---|---|---|---|---|")
    mismatch = False
    for cap in capacities:
        for policy in policies:
            t_ours: list[float] = []
            t_theirs: list[float] = []
            for _ in range(args.repeats):
                if t_theirs and t_theirs[0] > args.once_over_s:
                    break
                ours, t, a_ours = run_ours(policy, cap, packed)
                t_ours.append(t)
                if args.ours_only:
                    theirs, a_theirs = ours, ""
                else:
                    theirs, t, a_theirs = run_theirs(args.marconi_dir, policy, float(cap), raw)
                    t_theirs.append(t)
                same = ours == theirs
                mismatch |= not same
            hr_ours = 100 * sum(ours) / total_in
            hr_theirs = 100 * sum(theirs) / total_in
            mo = statistics.median(t_ours)
            mt = statistics.median(t_theirs) if t_theirs else float("nan")
            alpha = f"{a_ours} / {a_theirs}" if policy == "marconi" else "—"
            print(
                f"| {cap:.3g} | {policy} | {hr_ours:.3f} / {hr_theirs:.3f} | {alpha} | {mo:.3f} | {mt:.2f} "
                f"| {mt / mo:.1f}× | {len(t_ours)} |"
                + ("" if same else f" MISMATCH at request {_first_diff(ours, theirs)}")
            )
            sys.stdout.flush()
    print(f"\nload average {os.getloadavg()[0]:.1f} at end")
    return 1 if mismatch else 0


def _first_diff(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


if __name__ == "__main__":
    raise SystemExit(main())
