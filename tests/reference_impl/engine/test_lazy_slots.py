"""extra_buffer_lazy in the engine core: one ping-pong slot a request, so more requests run on the same state pool;
the checkpoints are extra_buffer's (tracks and donations: tests/sglang_oracle/test_sglang_extra_buffer.py)."""

from __future__ import annotations

import pytest
from test_engine_core import gsp_rows, multi_turn_rows, run

from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore
from reference_impl.radix.invariants import check_invariants


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
