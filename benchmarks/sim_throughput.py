"""Simulator speed: simulated requests and tokens per wall second, and how cost grows with requests.

Loads: the seed radix run (gsp 50×10, sys 10240, q 256, out 128, concurrency 5, Qwen3-Next TP4 H100)
and the seglen SWE-bench preset (100 sessions, sps 10, art 5; trace timestamps), each on the
``lru`` and ``branching`` arms; then the radix run at 1/4, 1/2 and 1x of its requests to show growth.

    python benchmarks/sim_throughput.py

Inner loop: these figures time ``simulate()`` on rows already in memory. The headline figure, the whole
``python -m reference_impl.simulate`` command (trace reading included) against a baseline, is
``benchmarks/whole_commands.py --only simulate``.
"""

from __future__ import annotations

import os
import platform
import sys
import time

from reference_impl.engine.arms import parse_arm
from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.simulator import simulate
from reference_impl.models import get_model
from workloads.arrival import LoadSpec, arrival_schedule
from workloads.gsp import PRESETS, generate_gsp
from workloads.swebench import PRESETS as SWE_PRESETS
from workloads.swebench import generate_swebench
from workloads.trace import TraceRow


def run(rows: list[TraceRow], arm: str, load: LoadSpec) -> tuple[float, float]:
    """(wall s, CPU s) of one simulation; on a shared machine the CPU seconds are the one-core cost."""
    spec = parse_arm(arm)
    config = EngineConfig(kv_tokens=1_200_000, state_slots=1_200, cache=spec.strategy, policy=spec.policy)
    timer = CostModel(get_model("qwen3-next-80b-a3b"), get_gpu("h100"), tp=4)
    start, cpu = time.perf_counter(), time.process_time()
    simulate(rows, EngineCore(config), timer, arrival_schedule(rows, load))
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> int:
    cpu = platform.processor() or platform.machine()
    print(f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}")
    radix = list(generate_gsp(PRESETS["radix"], vocab_size=151936, seed=42, preset="radix").rows)
    swe = list(generate_swebench(SWE_PRESETS["seglen"], vocab_size=151936, seed=42, preset="seglen").rows)
    print(f"load average {os.getloadavg()[0]:.1f} at start; rates use CPU seconds (one core)")
    print("inner loop: simulate() on rows in memory; whole commands: benchmarks/whole_commands.py")
    print("| load | arm | requests | input tokens | wall s | CPU s | sim requests/s | sim tokens/s |")
    print("|---|---|---|---|---|---|---|---|")
    loads = [
        ("radix (closed, c=5)", radix, LoadSpec("closed", max_concurrency=5)),
        ("seglen swebench (trace ts)", swe, LoadSpec("trace")),
    ]
    for name, rows, arrival in loads:
        tokens = sum(len(r.input_tokens) + len(r.output_tokens) for r in rows)
        for arm in ("lru", "branching"):
            wall, cpu_s = run(rows, arm, arrival)
            print(f"| {name} | {arm} | {len(rows)} | {tokens - sum(len(r.output_tokens) for r in rows)} | "
                  f"{wall:.2f} | {cpu_s:.2f} | {len(rows) / cpu_s:,.0f} | {tokens / cpu_s:,.0f} |", flush=True)
    print("\n| load | requests | CPU s (lru) | CPU ms per request |")
    print("|---|---|---|---|")
    sessions = sorted({r.session_id for r in swe}, key=str)

    def radix_part(frac: int) -> list[TraceRow]:
        return radix[: len(radix) // frac]

    def swe_part(frac: int) -> list[TraceRow]:  # whole sessions, so every conversation stays intact
        keep = set(sessions[: len(sessions) // frac])
        return [r for r in swe if r.session_id in keep]

    growth = (("radix", radix_part, LoadSpec("closed", max_concurrency=5)),
              ("seglen swebench", swe_part, LoadSpec("trace")))
    for label, part, load in growth:
        for frac in (4, 2, 1):
            rows = part(frac)
            _, cpu_s = run(rows, "lru", load)
            print(f"| {label} | {len(rows)} | {cpu_s:.2f} | {cpu_s / len(rows) * 1e3:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
