"""TokenSpeed's real scheduler (``tokenspeed-scheduler`` 0.1.0, the radix-era C++ cache of PR #162) as a hit oracle.

Runs in the TokenSpeed parser venv with the scheduler unpacked on PYTHONPATH (tests/tokenspeed/build_env.sh);
imports nothing from hybridbench. Reads JSON scenarios on stdin, each ``{"config": {...}, "requests": [{"tokens":
[...], "outputs": [...]}]}``; requests run one after another, each to completion, and a request's hit is the
``extend_prefix_lens`` of its first forward (what TokenSpeed reports as ``cached_tokens``:
generation_output_processor.add_cached_tokens). Prints one JSON list of hits per scenario.

The loop is TokenSpeed's own event loop (runtime/engine/event_loop.py) without a model: every forward op gets
its ``ExtendResult`` (only a prompt's last chunk and decode steps sample a token), a request ends with
``Finish``, and every host write-back is acknowledged with a successful ``WriteBackDoneEvent`` (radix
load-backs need no acknowledgement).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tokenspeed_scheduler import (
    Cache,
    ExecutionEvent,
    ForwardEvent,
    RequestSpec,
    Scheduler,
    SchedulerConfig,
)

MAX_STEPS = 10_000


def make_config(c: dict[str, Any]) -> SchedulerConfig:
    cfg = SchedulerConfig()
    cfg.role = SchedulerConfig.Role.Fused
    cfg.page_size = c["page_size"]
    cfg.num_device_pages = c["device_pages"]
    cfg.max_scheduled_tokens = c["chunk"]  # the chunked-prefill budget of one forward
    cfg.max_batch_size = 8
    cfg.num_host_pages = c["host_pages"]
    cfg.disable_l2_cache = c["host_pages"] == 0
    cfg.enable_mamba = c["mamba"]
    cfg.mamba_cache_chunk_size = c["page_size"]
    cfg.mamba_pool_total_chunks = c["state_slots"] if c["mamba"] else 0
    cfg.enable_mamba_l2 = c["mamba_l2"]
    cfg.mamba_l2_host_slots = c["host_state_slots"] if c["mamba_l2"] else 0
    return cfg


def run_request(s: Scheduler, rid: str, tokens: list[int], outputs: list[int]) -> int:
    spec = RequestSpec()
    spec.request_id = rid
    spec.tokens = tokens
    s.submit_requests([spec])
    hit: int | None = None
    sampled = 0
    finished = False
    idle_plans = 0
    for _ in range(MAX_STEPS):
        plan = s.next_execution_plan()
        events = ExecutionEvent()
        n = 0
        for op in plan.cache:
            if isinstance(op, Cache.WriteBackOp):
                for op_id in op.op_ids:
                    done = Cache.WriteBackDoneEvent()
                    done.op_id = op_id
                    done.success = True
                    events.add_event(done)
                    n += 1
        for fwd in plan.forward:
            extends = fwd.num_extends()
            for i, r in enumerate(fwd.request_ids):
                assert r == rid, f"unexpected request {r} in a one-at-a-time run"
                if i < extends:
                    if hit is None:
                        hit = int(fwd.extend_prefix_lens[i])
                    if fwd.extend_prefix_lens[i] + fwd.input_lengths[i] < len(tokens):
                        continue  # mid-prompt chunk: nothing sampled, no event (as the engine does)
                result = ForwardEvent.ExtendResult()
                result.request_id = r
                result.tokens = [outputs[sampled]]
                events.add_event(result)
                n += 1
                sampled += 1
                if sampled == len(outputs):
                    fin = ForwardEvent.Finish()
                    fin.request_id = r
                    events.add_event(fin)
                    finished = True
        if n or finished:
            s.advance(events)
        idle = not plan.cache and all(len(f.request_ids) == 0 for f in plan.forward)
        idle_plans = idle_plans + 1 if finished and idle else 0
        # Two idle plans in a row: a write-back planned one step after the finish has been acknowledged.
        if idle_plans == 2 and s.waiting_size() == 0 and s.prefilling_size() == 0 and s.decoding_size() == 0:
            assert hit is not None
            return hit
    raise RuntimeError(f"request {rid} did not finish in {MAX_STEPS} scheduler steps")


def main() -> None:
    out = []
    for scenario in json.load(sys.stdin):
        s = Scheduler(make_config(scenario["config"]))
        out.append([run_request(s, f"r{i}", r["tokens"], r["outputs"]) for i, r in enumerate(scenario["requests"])])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
