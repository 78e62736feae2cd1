"""SGLang PR #11214's radix-on prefill overhead, simulated: input throughput with the radix cache off and on.

The held-out configuration (SGLang PR #11214 review): Qwen3-Next-80B-A3B-Instruct, TP8, H100, bench_serving
``--dataset-name random --num-prompts 50 --random-input 20480 --random-output 1 --random-range-ratio 1``
at its default ``--request-rate inf``; chunked prefill 8192 (SGLang's H100 default). The seed measured
72806.69 input tok/s radix off and 64229.48 on (−11.8%). Nothing here is fitted to that: the radix-on
arms differ from ``disabled`` only by the state copies the cost model charges from bytes and bandwidth.

    python benchmarks/sim_prefill_overhead.py
"""

from __future__ import annotations

import sys

from reference_impl.engine.arms import parse_arm
from reference_impl.engine.core import EngineCore
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.simulator import simulate
from reference_impl.engine.sizing import engine_config
from reference_impl.models import get_model
from workloads.arrival import LoadSpec, arrival_schedule
from workloads.random_load import PRESETS, generate_random

SEED_OFF, SEED_ON = 72806.69, 64229.48  # input tok/s, SGLang PR #11214


def main() -> int:
    model = get_model("qwen3-next-80b-a3b")
    timer = CostModel(model, get_gpu("h100"), tp=8)
    rows = list(generate_random(PRESETS["prefill-overhead"], vocab_size=model.vocab_size, seed=0).rows)
    load = LoadSpec("closed", max_concurrency=len(rows))  # --request-rate inf: everything at t=0
    per_copy_us = timer.state_copy_seconds(1) * 1e6
    print(f"state {model.state_bytes() / 2**20:.1f} MiB ({model.state_bytes() / 8 / 2**20:.2f} MiB per TP rank); "
          f"one copy (read + write) {per_copy_us:.1f} us")
    print("| arm | input tok/s | vs disabled | state copies | copy seconds | duration s |")
    print("|---|---|---|---|---|---|")
    base = 0.0
    for name in ("disabled", "lru", "branching"):
        core = EngineCore(engine_config(parse_arm(name), timer))
        res = simulate(rows, core, timer, arrival_schedule(rows, load))
        sent = min(r.sent_s or 0.0 for r in res.records)
        end = max(r.end_s or 0.0 for r in res.records)
        tput = sum(r.prompt_tokens for r in res.records) / (end - sent)
        base = base or tput
        copies = core.strategy.counters.state_copies
        print(f"| {name} | {tput:,.0f} | {tput / base - 1:+.3%} | {copies} | "
              f"{timer.state_copy_seconds(copies):.6f} | {res.duration_s:.3f} |")
    print(f"| SGLang PR #11214 (no_buffer, TP8 H100) | {SEED_ON:,.0f} | {SEED_ON / SEED_OFF - 1:+.3%} | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
