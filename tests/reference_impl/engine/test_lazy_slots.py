"""extra_buffer_lazy in the engine core: one ping-pong slot a request, so more requests run on the same state pool;
the checkpoints are extra_buffer's (tracks and donations: tests/sglang_oracle/test_sglang_extra_buffer.py)."""

from __future__ import annotations

import pytest
from test_engine_core import gsp_rows, multi_turn_rows, run

from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore
from reference_impl.lifecycle.strategies import ExtraBufferLazyStrategy
from reference_impl.policies.registry import make_policy
from reference_impl.radix.invariants import check_invariants
from reference_impl.radix.pools import KVPool, StatePool
from reference_impl.radix.tree import MambaRadixTree, cache_chunk_size


def _balanced(core: EngineCore) -> None:
    check_invariants(core.tree)
    pool = core.tree.state_pool
    assert pool.available + core.tree.total_states() == pool.size  # no boundary slot left behind


def test_lazy_runs_more_requests_on_the_same_state_pool_and_hits_as_extra_buffer_does() -> None:
    rows = gsp_rows(groups=3, per_group=8, out=300)
    results = {}
    for cache in ("extra_buffer", "extra_buffer_lazy"):
        core, res = run(rows, cache, states=20, conc=8, track_interval=64)
        assert all(r.status == "ok" for r in res.records)
        _balanced(core)
        results[cache] = (core.max_running, res)
    (eager, eager_res), (lazy, lazy_res) = results["extra_buffer"], results["extra_buffer_lazy"]
    assert (eager, lazy) == (20 // 5, 20 // 4)  # 3 + 2 slots a running request against 3 + 1
    # More requests decode at once: the same work ends sooner.
    peak = {c: max(s.num_requests for s in r.steps if s.kind == "decode") for c, (_, r) in results.items()}
    assert peak == {"extra_buffer": eager, "extra_buffer_lazy": lazy}
    assert lazy_res.duration_s < eager_res.duration_s
    assert sum(r.cached_tokens for r in lazy_res.records) > 0


def test_a_boundary_without_a_free_slot_tracks_in_place_and_loses_nothing() -> None:
    # Six long sessions on a pool with no slot to spare: 0.5.23 never evicts for the boundary's second slot.
    rows = multi_turn_rows(sessions=6, turns=3, out_len=(150, 300))
    core, res = run(rows, "extra_buffer_lazy", states=24, conc=6, track_interval=64)
    assert core.strategy.counters.in_place_tracks > 0  # some boundaries had no second slot
    assert all(r.status == "ok" for r in res.records)
    for rec, row in zip(res.records, rows, strict=True):
        assert rec.output_tokens == len(row.output_tokens)
    _balanced(core)


@pytest.mark.parametrize(("overrides", "why"), [
    ({"overlap": False}, "requires the overlap schedule"),
    ({"semantics": "0.5.9"}, "0.5.9 has no extra_buffer_lazy"),
])
def test_lazy_is_refused_where_sglang_refuses_it(overrides: dict[str, object], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        EngineConfig(kv_tokens=10_000, state_slots=20, cache="extra_buffer_lazy", **overrides)  # type: ignore[arg-type]


def _crossing(semantics: str, free: int) -> tuple[int, int]:
    """Three decoding requests cross a decode track boundary in one step with ``free`` slots left in the pool and
    four cached states evictable: (states evicted for second slots, boundaries tracked in place)."""
    tree = MambaRadixTree(KVPool(1 << 16), StatePool(40), make_policy("lru"), page_size=1,
                          chunk_size=cache_chunk_size(64, semantics), semantics=semantics)
    strat = ExtraBufferLazyStrategy(tree, chunked_prefill_size=None, track_interval=64, overlap=True)
    for k in range(4):  # four finished requests leave their states in the tree, unlocked
        done = strat.admit([1000 * (k + 1) + t for t in range(128)])
        strat.prefill(done, finishes_after_prefill=True)
        strat.finish(done)
    live = [strat.admit([100_000 * (k + 1) + t for t in range(100)]) for k in range(3)]
    for req in live:
        strat.prefill(req, finishes_after_prefill=False)
    held = [tree.state_pool.alloc() for _ in range(tree.state_pool.available - free)]
    assert all(s is not None for s in held) and tree.state_pool.available == free
    states, token = tree.total_states(), 0
    while strat.counters.in_place_tracks == 0 and tree.total_states() == states and live[0].kv_len < 200:
        strat.begin_decode_step(live)  # as the engine core steps a batch
        for req in live:
            token += 1
            strat.decode(req, [token])
        strat.end_decode_step()
    result = states - tree.total_states(), strat.counters.in_place_tracks
    for slot in held:
        tree.state_pool.free(slot)  # type: ignore[arg-type]
    for req in live:
        strat.finish(req)
    check_invariants(tree)  # every slot back with the tree or the pool: none of the second slots leaked
    return result


@pytest.mark.parametrize(("semantics", "free", "evicted", "in_place"), [
    ("0.5.16", 0, 3, 0),  # every request at the boundary evicts for its own second slot before the forward
    ("0.5.23", 0, 0, 3),  # 0.5.23 never evicts for it: all three write in place
    ("0.5.23", 1, 0, 2),  # one free slot serves one request; the old slots come back only after the forward
])
def test_requests_crossing_a_boundary_together_take_their_second_slots_before_any_is_freed(
        semantics: str, free: int, evicted: int, in_place: int) -> None:
    assert _crossing(semantics, free) == (evicted, in_place)
