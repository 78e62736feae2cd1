"""Replay throughput of every policy, in input tokens per second on one core.

Generates SWE-bench-like agent traces with ``python -m workloads.generate swebench`` (sessions × each
scale: by default 10 and 100 sessions, i.e. 1x and 10x), replays each under every policy with a fixed
byte capacity, and prints a Markdown table (the README's "Benchmark results" come from it). Wall time
is measured here, in a benchmark, never in a test.

    python benchmarks/replay_throughput.py [--sessions 100] [--scales 0.1,1] [--capacity-bytes 4e10]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reference_impl.models import get_model
from reference_impl.policies.registry import POLICIES, make_replay_cache
from reference_impl.replay.api import ReplayConfig
from reference_impl.replay.run import ReplayResult, replay_rows
from workloads.trace import read_trace


def generate(path: Path, sessions: int, seed: int) -> None:
    subprocess.run(
        [
            sys.executable, "-m", "workloads.generate", "swebench",
            "--num-sessions", str(sessions), "--vocab-size", "32000", "--seed", str(seed), "-o", str(path),
        ],
        check=True,
    )


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--scales", default="0.1,1", help="multiples of --sessions to generate")
    ap.add_argument("--capacity-bytes", type=float, default=4e10)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--strategy", default="no_buffer", choices=["no_buffer", "extra_buffer"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    model = get_model("marconi-7b")
    print(f"machine: {machine()}")
    print(f"capacity {args.capacity_bytes:g} B, model marconi-7b, strategy {args.strategy} (lru/seglen)\n")
    print(f"load average {os.getloadavg()[0]:.1f} at start; CPU s is the one-core cost on a shared machine")
    print("| policy | trace | requests | input tokens | token hit rate | replay s | CPU s | CPU ms/request "
          "| input tokens/CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for scale in (float(s) for s in args.scales.split(",")):
            sessions = max(1, round(args.sessions * scale))
            path = Path(tmp) / f"swebench_{sessions}.jsonl"
            generate(path, sessions, args.seed)
            rows = read_trace(path).rows
            for name in args.policies.split(","):
                config = ReplayConfig(capacity_bytes=int(args.capacity_bytes), model=model, strategy=args.strategy)
                cpu = time.process_time()
                result: ReplayResult = replay_rows(name, rows, make_replay_cache(name, config), model)
                cpu = time.process_time() - cpu
                rate = result.input_tokens / cpu if cpu else float("inf")
                print(
                    f"| {name} | {sessions} sessions | {result.num_requests} | {result.input_tokens} | "
                    f"{result.token_hit_rate:.4f} | {result.elapsed_s:.2f} | {cpu:.2f} | "
                    f"{cpu / result.num_requests * 1e3:.2f} | {rate:,.0f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
