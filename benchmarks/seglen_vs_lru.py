"""seglen vs LRU eviction on the seglen PR's loads, in the simulator (modelled, not measured).

SGLang PR #22172 reports seglen -29.5% mean TTFT on prefix-heavy data, -26.1% on SWE-bench traces
and -3.4% on ShareGPT vs LRU (Qwen3.5-9B, one H100, extra_buffer, weight 0.85, bench_serving at request
rate 8 / 10). This runs both policies on the same extra_buffer engine (Qwen3.5-9B, H100, TP1) over the
PR's load shapes, under several cache sizes and seglen weights, and prints a markdown table of token hit
rate and modelled mean TTFT. Cache sizes are fractions of each load's footprint (the tokens an infinite
cache ends up holding), split between KV and state slots as SGLang splits memory (states r/(1+r), r=0.9),
so every row evicts by construction. Nothing is fitted to the seed's numbers.

    python benchmarks/seglen_vs_lru.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

from reference_impl.engine.arms import parse_arm
from reference_impl.engine.core import EngineCore
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.simulator import simulate
from reference_impl.engine.sizing import engine_config
from reference_impl.models import get_model
from workloads.arrival import LoadSpec, arrival_schedule
from workloads.gsp import GspParams, generate_gsp
from workloads.sharegpt import ShareGptParams, generate_sharegpt
from workloads.stats import compute_stats
from workloads.swebench import PRESETS as SWE
from workloads.swebench import generate_swebench
from workloads.trace import TraceRow

VOCAB = 151_936


def loads(quick: bool) -> dict[str, tuple[list[TraceRow], LoadSpec]]:
    f = 4 if quick else 1
    gsp = GspParams(num_groups=64 // f, prompts_per_group=16, system_prompt_len=8192, question_len=256,
                    output_len=128)
    swe = replace(SWE["seglen"], num_sessions=100 // (5 * f))  # 20 sessions (5 quick): minutes, not hours
    chat = ShareGptParams(num_sessions=1000 // f, single_turn=True, output_len=128)
    return {
        "prefix-heavy (gsp 64x16, sys 8192)" if not quick else "prefix-heavy (gsp 16x16, sys 8192)":
            (list(generate_gsp(gsp, VOCAB, 1).rows), LoadSpec("poisson", request_rate=8.0)),
        f"SWE-bench ({swe.num_sessions} sessions, sps 10, art 5)":
            (list(generate_swebench(swe, VOCAB, 1).rows), LoadSpec("poisson", request_rate=10.0)),
        f"ShareGPT first turns ({chat.num_sessions}, out 128)":
            (list(generate_sharegpt(chat, VOCAB, 1).rows), LoadSpec("poisson", request_rate=8.0)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a quarter of each load")
    args = ap.parse_args()
    timer = CostModel(get_model("qwen3.5-9b"), get_gpu("h100"), tp=1)
    fractions, weights = (0.77, 0.70, 0.50), (0.5, 0.85, 2.0)
    print("| load (footprint tokens) | mem fraction | KV tokens | states | LRU hit | LRU TTFT ms | "
          + " | ".join(f"seglen w={w} hit | TTFT" for w in weights) + " |")
    print("|---" * (6 + 2 * len(weights)) + "|")
    for name, (rows, load) in loads(args.quick).items():
        arrival = arrival_schedule(rows, load, 1)
        footprint = compute_stats(rows).stored_tokens
        for frac in fractions:
            sized = engine_config(parse_arm("branching"), timer, mem_fraction_static=frac)
            kv, slots = sized.kv_tokens, sized.state_slots
            cells = []
            for arm, w in [("branching", None), *[("branching+seglen", x) for x in weights]]:
                t0 = time.perf_counter()
                cfg = engine_config(parse_arm(arm), timer, mem_fraction_static=frac, eff_weight=w)
                res = simulate(rows, EngineCore(cfg), timer, arrival)
                ok = [r for r in res.records if r.status == "ok"]
                hit = sum(r.cached_tokens for r in ok) / max(1, sum(r.prompt_tokens for r in ok))
                ttft = sum((r.first_token_s or 0.0) - (r.sent_s or 0.0) for r in ok) / max(1, len(ok)) * 1e3
                cells.append((hit, ttft))
                print(f"  {name} {frac} {arm} w={w}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            base_ttft = cells[0][1]
            text = [f"{cells[0][0]:.3f}", f"{base_ttft:.0f}"]
            text += [x for h, t in cells[1:] for x in (f"{h:.3f}", f"{t:.0f} ({t / base_ttft - 1:+.1%})")]
            print(f"| {name} ({footprint:,}) | {frac:g} | {kv:,} | {slots:,} | " + " | ".join(text) + " |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
