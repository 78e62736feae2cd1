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
from reference_impl.engine.decode_run import plan_run
from reference_impl.engine.hardware import get_gpu
from reference_impl.models import get_model
from reference_impl.radix.invariants import check_invariants
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
    """The result and core of each path, and how many runs the run path took."""
    taken = []

    def counting(core: EngineCore) -> Any:
        run = plan_run(core)
        taken.append(run is not None and run.max_steps > 1)
        return run

    out = []
    for runs in (False, True):
        core = EngineCore(cfg)
        with monkeypatch.context() as m:
            m.setattr(simulator, "plan_run", counting)
            res = simulator.simulate(rows, core, t, arrival_schedule(rows, load, 5), decode_runs=runs)
        check_invariants(core.tree)
        out.append((res, core))
    return (*out, sum(taken))


def assert_same(single: tuple[Any, EngineCore], runs: tuple[Any, EngineCore]) -> None:
    (a, ca), (b, cb) = single, runs
    for x, y in zip(a.steps, b.steps, strict=True):
        assert x == y
    for x, y in zip(a.records, b.records, strict=True):
        assert x == y
    assert a == b
    assert ca.counters == cb.counters and ca.strategy.counters == cb.strategy.counters
    assert ca.new_token_ratio == cb.new_token_ratio
    ta, tb = ca.tree, cb.tree
    assert (ta.kv_pool.available, ta.state_pool.available) == (tb.kv_pool.available, tb.state_pool.available)
    assert ta.state_pool.content == tb.state_pool.content
    # the same nodes, made in the same order (ids), touched in the same order (ticks): eviction order agrees
    assert [(i, n.kv_tick, n.depth) for i, n in sorted(ta.evictable_leaves.items())] == \
        [(i, n.kv_tick, n.depth) for i, n in sorted(tb.evictable_leaves.items())]
    assert [(i, n.state_tick) for i, n in sorted(ta.evictable_states.items())] == \
        [(i, n.state_tick) for i, n in sorted(tb.evictable_states.items())]


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
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("load", [LoadSpec("trace"), LoadSpec("closed", max_concurrency=6),
                                  LoadSpec("poisson", request_rate=4.0)], ids=["trace", "closed", "poisson"])
def test_runs_of_decode_steps_equal_single_steps(case: str, load: LoadSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    single, runs, taken = both(sessions(), CASES[case], load, timer(), monkeypatch)
    assert taken > 10  # the runs path ran in bulk, and often: not a comparison of two single-step runs
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
