"""Time generating and writing the seglen SWE-bench preset (100 sessions, inputs up to 32K tokens),
and reading it back with ``workloads.stats``, on one core. A benchmark, not a test.

    python benchmarks/workload_generation.py
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    cpu = platform.processor() or platform.machine()
    print(f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "swebench_sps=10_art=5_nums=100.jsonl"
        gen = timed(["workloads.generate", "swebench", "--preset", "seglen", "--vocab-size", "151936", "-o", str(out)])
        size = out.stat().st_size
        stats = timed(["workloads.stats", str(out)])
    print("| step | wall s |")
    print("|---|---|")
    print(f"| generate + write seglen swebench preset ({size / 1e6:.0f} MB) | {gen:.1f} |")
    print(f"| workloads.stats on it | {stats:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
