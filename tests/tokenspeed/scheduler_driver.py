"""TokenSpeed's real scheduler (``tokenspeed-scheduler`` 0.1.0, the radix-era C++ cache of PR #162) as a hit oracle.

Runs in the TokenSpeed parser venv with the scheduler unpacked on PYTHONPATH (tests/tokenspeed/build_env.sh);
imports nothing from hybridbench. Reads JSON scenarios on stdin, each ``{"config": {...}, "requests": [{"tokens":
[...], "outputs": [...]}]}``, and prints one JSON list per scenario: each request's ``cached_tokens``, counted as
TokenSpeed's engine counts what it reports in usage (generation_output_processor.add_cached_tokens: every
forward adds ``max(0, extend_prefix_len - computed_length)``).

``sequential`` (the default) runs a scenario's requests one after another, each to completion (``null`` for a
scenario in which the scheduler stalls: nothing planned while a request waits); ``trace`` does the
same and prints, per extend forward, the state slot it starts from and the slot its checkpoint goes to. ``concurrent``
submits them all at once and also logs every round with TokenSpeed 0.1.1's own batch logger
(runtime/engine/batch_log.py: the "Prefill batch." / "Mix batch." / "Decode batch." lines ``ts serve`` writes;
tokenspeed 0.1.1 and the kernel stub must then be on PYTHONPATH too); it prints ``{"cached_tokens": [...],
"log": "..."}`` per scenario.

The loop is TokenSpeed's event loop (runtime/engine/event_loop.py) without a model: a forward that ends a
prompt, and every decode step, samples the request's next given output token (``ExtendResult``); a request
ends with ``Finish``; every host write-back is acknowledged with a successful ``WriteBackDoneEvent`` (radix
load-backs need no acknowledgement).
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokenspeed_scheduler import (
    Cache,
    ExecutionEvent,
    ForwardEvent,
    RequestSpec,
    Scheduler,
    SchedulerConfig,
)

MAX_STEPS = 20_000
STALL_PLANS = 50


class Stalled(RuntimeError):
    """The scheduler plans nothing while requests wait (a request its device pool cannot hold)."""


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
    cfg.enable_mixed_prefill_decode = c.get("mixed", False)  # ts serve --enable-mixed-batch
    return cfg


@dataclass
class Live:
    tokens: list[int]
    outputs: list[int]
    sampled: int = 0
    computed: int = 0
    cached: int = 0
    done: bool = False


def run(s: Scheduler, requests: list[dict[str, Any]], on_forward: Callable[[Any, Scheduler], None]) -> list[int]:
    """Submit ``requests`` together; return each one's cached_tokens once all have finished."""
    live = {f"r{i}": Live(r["tokens"], r["outputs"]) for i, r in enumerate(requests)}
    specs = []
    for rid, req in live.items():
        spec = RequestSpec()
        spec.request_id = rid
        spec.tokens = req.tokens
        specs.append(spec)
    s.submit_requests(specs)
    idle_plans = stalled = 0
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
            if not fwd.request_ids:
                continue
            on_forward(fwd, s)
            extends = fwd.num_extends()
            for i, rid in enumerate(fwd.request_ids):
                req = live[rid]
                if i < extends:
                    prefix = int(fwd.extend_prefix_lens[i])
                    req.cached += max(0, prefix - req.computed)
                    req.computed = prefix + int(fwd.input_lengths[i])
                    if req.computed < len(req.tokens):
                        continue  # mid-prompt chunk: nothing sampled, no event (as the engine does)
                result = ForwardEvent.ExtendResult()
                result.request_id = rid
                result.tokens = [req.outputs[req.sampled]]
                events.add_event(result)
                n += 1
                req.sampled += 1
                if req.sampled == len(req.outputs):
                    fin = ForwardEvent.Finish()
                    fin.request_id = rid
                    events.add_event(fin)
                    req.done = True
        if n:
            s.advance(events)
        idle = not plan.cache and all(len(f.request_ids) == 0 for f in plan.forward)
        stalled = stalled + 1 if idle and not all(r.done for r in live.values()) else 0
        if stalled == STALL_PLANS:  # nothing can be scheduled, nothing will change: the pools are deadlocked
            raise Stalled(f"no forward in {STALL_PLANS} plans with requests unfinished: {list(live)}")
        idle_plans = idle_plans + 1 if idle and all(r.done for r in live.values()) else 0
        # Two idle plans in a row: a write-back planned one step after the last finish has been acknowledged.
        if idle_plans == 2 and s.waiting_size() == 0 and s.prefilling_size() == 0 and s.decoding_size() == 0:
            return [r.cached for r in live.values()]
    raise RuntimeError(f"requests did not finish in {MAX_STEPS} scheduler steps: {live}")


def batch_logger() -> tuple[Callable[[Any, Scheduler], None], io.StringIO]:
    from tokenspeed.runtime.engine import batch_log  # tokenspeed 0.1.1's, as ts serve logs

    text = io.StringIO()
    handler = logging.StreamHandler(text)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s"))
    batch_log.logger.handlers[:] = [handler]  # only ours: stdout carries the JSON answer
    batch_log.logger.propagate = False
    batch_log.logger.setLevel(logging.INFO)
    blog = batch_log.BatchLogger(enabled=True, decode_log_interval=1, num_total_pages=64, spec_num_steps=0,
                                 spec_num_tokens=0, dp_rank=0, pd_lifecycle=None, context_length=lambda rid: 0)

    def log(fwd: Any, s: Scheduler) -> None:
        blog.log_dispatch(fwd, {"num_queue_reqs": s.waiting_size(), "num_active_pages": s.active_kv_pages(),
                                "num_cached_pages": 0})

    return log, text


def state_trace() -> tuple[Callable[[Any, Scheduler], None], list[dict[str, Any]]]:
    """Per extend: the request, its prefix, the state slot it starts from (COW source, -1: none) and the slot
    its checkpoint goes to with the forward's end (the model executor snapshots the state there)."""
    seen: list[dict[str, Any]] = []

    def log(fwd: Any, s: Scheduler) -> None:
        for i in range(fwd.num_extends()):
            prefix = int(fwd.extend_prefix_lens[i])
            seen.append({"prefix": prefix, "end": prefix + int(fwd.input_lengths[i]),
                         "cow": int(fwd.mamba_cow_src_indices[i]),
                         "checkpoint": int(fwd.mamba_checkpoint_dst_indices[i])})

    return log, seen


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "sequential"
    out: list[Any] = []
    for scenario in json.load(sys.stdin):
        s = Scheduler(make_config(scenario["config"]))
        if mode == "trace":
            log, seen = state_trace()
            for i, r in enumerate(scenario["requests"]):
                run(s, [r], log)
                for row in seen:
                    row.setdefault("request", i)
            out.append(seen)
        elif mode == "concurrent":
            log, text = batch_logger()
            out.append({"cached_tokens": run(s, scenario["requests"], log), "log": text.getvalue()})
        else:
            try:
                out.append([run(s, [r], lambda fwd, s: None)[0] for r in scenario["requests"]])
            except Stalled:
                out.append(None)
    # The C++ scheduler prints its warnings on stdout: the answer is the last line.
    print("\n" + json.dumps(out))


if __name__ == "__main__":
    main()
