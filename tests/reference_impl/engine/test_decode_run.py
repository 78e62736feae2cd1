"""Runs of decode steps applied at once give exactly what single steps give: every record, step and counter."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from reference_impl.engine import simulator
from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore
from reference_impl.engine.cost_model import CALIBRATED, CostModel
from reference_impl.engine.decode_run import DecodeRun, plan_run
from reference_impl.engine.hardware import get_gpu
from reference_impl.models import get_model
from reference_impl.radix.invariants import check_invariants
from reference_impl.radix.tree import MambaRadixTree
from workloads.arrival import LoadSpec, arrival_schedule
from workloads.trace import TraceRow


def sessions(n: int = 8, turns: int = 3, seed: int = 3, out: tuple[int, int] = (5, 300)) -> list[TraceRow]:
    """Multi-turn sessions sharing a system prompt, arriving over a few seconds, outputs of very unequal length."""
    rng = random.Random(seed)
    system = [rng.randrange(5000) for _ in range(400)]
    rows = []
    for s in range(n):
        hist = system + [rng.randrange(5000) for _ in range(rng.randint(50, 900))]
        for t in range(turns):
            user = [rng.randrange(5000) for _ in range(rng.randint(20, 300))]
            answer = tuple(rng.randrange(5000) for _ in range(rng.randint(*out)))
            rows.append(TraceRow(s, t, s * 0.4 + t * 2.0, tuple(hist + user), answer))
            hist = hist + user + list(answer)
    return rows


def timer(frontend_s: float = CALIBRATED.frontend_s) -> CostModel:
    return CostModel(get_model("qwen3-next-80b-a3b"), get_gpu("h100"), tp=4,
                     factors=replace(CALIBRATED, frontend_s=frontend_s))


def both(rows: list[TraceRow], cfg: EngineConfig, load: LoadSpec, t: CostModel,
         monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """The result and core of each path, and how many steps the run path took in runs."""
    runs_made: list[DecodeRun] = []

    def recording(core: EngineCore) -> DecodeRun | None:
        run = plan_run(core)
        if run is not None:
            runs_made.append(run)
        return run

    out = []
    for runs in (False, True):
        core = EngineCore(cfg)
        with monkeypatch.context() as m:
            m.setattr(simulator, "plan_run", recording)
            res = simulator.simulate(rows, core, t, arrival_schedule(rows, load, 5), decode_runs=runs)
        check_invariants(core.tree)
        out.append((res, core))
    return (*out, sum(r.steps for r in runs_made))


def tree_state(tree: MambaRadixTree) -> list[tuple[Any, ...]]:
    """Every node as the next eviction, match or insert sees it: place, edge, locks, ticks, state, host copies."""
    nodes, stack = [], [tree.root]
    while stack:
        n = stack.pop()
        nodes.append((n.id, n.depth, n.key, n.kv_lock, n.state_lock, n.kv_tick, n.state_tick, n.state, n.host_kv,
                      n.host_state, None if n.parent is None else n.parent.id))
        stack.extend(n.children.values())
    return sorted(nodes)


def pools(tree: MambaRadixTree) -> tuple[Any, ...]:
    # the free list's order decides which slot ids later requests get
    return (tree.kv_pool.available, tree.state_pool.available, tree.state_pool._free, tree.state_pool._fresh,
            tree.state_pool.content)


def assert_same(single: tuple[Any, EngineCore], runs: tuple[Any, EngineCore]) -> None:
    (a, ca), (b, cb) = single, runs
    for x, y in zip(a.steps, b.steps, strict=True):
        assert x == y
    for x, y in zip(a.records, b.records, strict=True):
        assert x == y
    assert a == b
    assert ca.counters == cb.counters and ca.strategy.counters == cb.strategy.counters
    assert ca.new_token_ratio == cb.new_token_ratio
    assert tree_state(ca.tree) == tree_state(cb.tree) and pools(ca.tree) == pools(cb.tree)
    if ca.host is not None and cb.host is not None:
        assert ca.host.counters == cb.host.counters
        assert tree_state(ca.host.tree) == tree_state(cb.host.tree) and pools(ca.host.tree) == pools(cb.host.tree)


CASES = {
    "disabled": EngineConfig(kv_tokens=400_000, state_slots=64, cache="disabled"),
    "no_buffer": EngineConfig(kv_tokens=400_000, state_slots=64, cache="no_buffer", chunked_prefill_size=512),
    "extra_buffer": EngineConfig(kv_tokens=400_000, state_slots=64, cache="extra_buffer", page_size=64),
    # a short interval: requests cross several track points a run, and a run may hold only one of them
    "extra_buffer tracks every 16": EngineConfig(kv_tokens=400_000, state_slots=64, cache="extra_buffer",
                                                 page_size=16, track_interval=16),
    "seglen with a host tier": EngineConfig(kv_tokens=400_000, state_slots=64, cache="extra_buffer", page_size=64,
                                            policy="seglen", host_kv_tokens=1_000_000, host_state_slots=64),
    # tight pools: evictions, blocked admissions and retractions between (and never inside) runs
    "tight pools": EngineConfig(kv_tokens=6_000, state_slots=24, cache="no_buffer", init_new_token_ratio=0.05),
    # the older releases' cache semantics (0.5.9 frees duplicate KV at insert; 0.5.16 evicts per extend batch)
    "0.5.9 semantics": EngineConfig(kv_tokens=8_000, state_slots=24, cache="no_buffer", semantics="0.5.9"),
    "0.5.16 semantics, no overlap": EngineConfig(kv_tokens=8_000, state_slots=24, cache="extra_buffer", page_size=16,
                                                 track_interval=32, overlap=False, semantics="0.5.16"),
    "lpm, 3 running": EngineConfig(kv_tokens=400_000, state_slots=64, cache="no_buffer", schedule_policy="lpm",
                                   max_running_requests=3),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("load", [LoadSpec("trace"), LoadSpec("closed", max_concurrency=6),
                                  LoadSpec("poisson", request_rate=4.0)], ids=["trace", "closed", "poisson"])
def test_runs_of_decode_steps_equal_single_steps(case: str, load: LoadSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    single, runs, taken = both(sessions(), CASES[case], load, timer(), monkeypatch)
    assert taken > 100  # steps taken in runs: not a comparison of two single-step paths
    assert_same(single, runs)
    if case == "tight pools":
        assert single[1].counters.retractions > 0 or single[1].counters.admission_blocked > 0


def test_requests_finishing_in_one_step_finish_in_batch_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # Equal outputs: a whole batch finishes in one step of a run; the order of their inserts is the tree's order.
    rows = [replace(r, output_tokens=(tuple(r.output_tokens) * 40)[:40])
            for r in sessions(n=6, turns=2, out=(1, 3))]
    single, runs, taken = both(rows, CASES["no_buffer"], LoadSpec("closed", max_concurrency=6), timer(),
                               monkeypatch)
    assert taken > 0
    assert max(s.num_requests for s in single[0].steps if s.kind == "decode") == 6
    assert_same(single, runs)


def test_a_send_with_no_frontend_latency_still_ends_the_run_before_its_arrival(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A client's next turn arrives the moment it is sent: a run must not step past that moment.
    single, runs, taken = both(sessions(n=5, turns=4), CASES["no_buffer"], LoadSpec("closed", max_concurrency=3),
                               timer(frontend_s=0.0), monkeypatch)
    assert taken > 10
    assert_same(single, runs)


def test_tokenspeed_pages_are_never_decoded_in_runs() -> None:
    core = EngineCore(EngineConfig(kv_tokens=100_000, state_slots=32, cache="tokenspeed", page_size=64))
    for i in range(3):
        core.add_request(i, tuple(range(1000 * i, 1000 * i + 300)), 50)
    while (batch := core.schedule()) is not None and batch.kind == "prefill":
        core.complete(batch, [7] * sum(1 for it in batch.items if it.end == it.request.cached.input_len))  # type: ignore[union-attr]
    assert core.running and plan_run(core) is None
