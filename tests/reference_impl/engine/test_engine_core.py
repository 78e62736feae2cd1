"""The engine core under memory pressure: never allocates from an empty pool, loses no request."""

from __future__ import annotations

import random

import pytest

from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.simulator import simulate
from reference_impl.models import get_model
from reference_impl.radix.invariants import check_invariants
from workloads.arrival import LoadSpec, arrival_schedule
from workloads.trace import TraceRow


def gsp_rows(
    *, groups: int = 4, per_group: int = 6, system: int = 600, question: int = 80, out: int = 40, seed: int = 0
) -> list[TraceRow]:
    rng = random.Random(seed)
    rows = []
    for g in range(groups):
        sys_prompt = [rng.randrange(5000) for _ in range(system)]
        for p in range(per_group):
            q = [rng.randrange(5000) for _ in range(question)]
            o = [rng.randrange(5000) for _ in range(out)]
            rows.append(TraceRow(g * per_group + p, 0, 0.0, tuple(sys_prompt + q), tuple(o)))
    rng.shuffle(rows)
    return rows


def multi_turn_rows(
    sessions: int = 6, turns: int = 4, seed: int = 1, out_len: tuple[int, int] = (10, 80)
) -> list[TraceRow]:
    rng = random.Random(seed)
    rows = []
    for s in range(sessions):
        hist = [rng.randrange(5000) for _ in range(300)]
        for t in range(turns):
            user = [rng.randrange(5000) for _ in range(rng.randint(20, 120))]
            out = [rng.randrange(5000) for _ in range(rng.randint(*out_len))]
            rows.append(TraceRow(s, t, float(s), tuple(hist + user), tuple(out)))
            hist = hist + user + out
    return rows


def run(rows: list[TraceRow], cache: str, *, kv: int = 200_000, states: int = 64, conc: int = 4, **kw: object):
    cfg = EngineConfig(kv_tokens=kv, state_slots=states, cache=cache, chunked_prefill_size=256, **kw)  # type: ignore[arg-type]
    core = EngineCore(cfg)
    timer = CostModel(get_model("qwen3-next-80b-a3b"), get_gpu("h100"), tp=4)
    return core, simulate(rows, core, timer, arrival_schedule(rows, LoadSpec("closed", max_concurrency=conc)))


@pytest.mark.parametrize("cache", ["disabled", "no_buffer", "extra_buffer", "extra_buffer_lazy"])
def test_tight_pools_retract_and_readmit_without_losing_a_token(cache: str) -> None:
    rows = multi_turn_rows(turns=2, out_len=(200, 400))
    # An optimistic new-token ratio admits more than the pool can decode: retraction must follow.
    core, res = run(rows, cache, kv=3_000, states=40, conc=6, init_new_token_ratio=0.05, min_new_token_ratio=0.05)
    assert res.retractions > 0  # the KV pool really was too small for six growing sessions
    assert all(r.status == "ok" for r in res.records)
    for rec, row in zip(res.records, rows, strict=True):
        assert rec.output_tokens == len(row.output_tokens)
    check_invariants(core.tree)
    assert core.tree.kv_pool.available + core.tree.total_kv_tokens() == core.tree.kv_pool.size
    assert core.tree.state_pool.available + core.tree.total_states() == core.tree.state_pool.size


def test_cache_hits_cut_ttft_on_shared_prefixes_in_the_seed_direction() -> None:
    rows = gsp_rows()
    ttft = {}
    hits = {}
    for cache in ("disabled", "no_buffer", "extra_buffer"):
        _, res = run(rows, cache)
        ttft[cache] = sum(r.ttft_ms or 0 for r in res.records) / len(rows)
        hits[cache] = sum(r.cached_tokens for r in res.records)
    assert hits["disabled"] == 0
    # no_buffer gets states at chunk ends (256, 512) inside the 600-token system prompt, so it hits.
    assert hits["no_buffer"] > 0 and hits["extra_buffer"] > 0
    assert ttft["no_buffer"] < ttft["disabled"] and ttft["extra_buffer"] < ttft["disabled"]


def test_two_runs_with_one_seed_are_identical() -> None:
    rows = multi_turn_rows()
    def once() -> list[tuple[object, ...]]:
        cfg = EngineConfig(kv_tokens=3_000, state_slots=24, cache="extra_buffer", chunked_prefill_size=128)
        core = EngineCore(cfg)
        timer = CostModel(get_model("nemotron-h-8b"), get_gpu("a100"))
        res = simulate(rows, core, timer, arrival_schedule(rows, LoadSpec("poisson", request_rate=3.0), 7))
        return [(r.sent_s, r.first_token_s, r.end_s, r.cached_tokens, tuple(r.itl_ms)) for r in res.records]
    assert once() == once()


def test_max_running_is_capped_by_state_slots_per_request() -> None:
    core = EngineCore(EngineConfig(kv_tokens=10_000, state_slots=20, cache="extra_buffer", max_running_requests=64))
    assert core.max_running == 20 // 5  # 3 + 2 ping-pong slots with overlap scheduling
    core = EngineCore(EngineConfig(kv_tokens=10_000, state_slots=20, cache="disabled"))
    assert core.max_running == 20
    with pytest.raises(ValueError, match="cannot hold one running request"):
        EngineCore(EngineConfig(kv_tokens=10_000, state_slots=2, cache="no_buffer"))


@pytest.mark.parametrize(("semantics", "per_request", "chunk"), [
    ("0.5.23", 4, 128), ("0.5.16", 4, 128),
    # 0.5.9 gives every request a ping-pong pair, overlap or not, and tracks on FLA's 64 whatever the model's chunk
    ("0.5.9", 5, 64),
])
def test_extra_buffer_slots_and_grid_follow_the_release(semantics: str, per_request: int, chunk: int) -> None:
    config = EngineConfig(kv_tokens=10_000, state_slots=20, cache="extra_buffer", overlap=False, semantics=semantics,
                          mamba_chunk_size=128)
    core = EngineCore(config)
    assert core.max_running == 20 // per_request
    assert core.tree.chunk_size == chunk


def test_a_request_larger_than_the_pool_is_aborted_not_crashed() -> None:
    rows = [TraceRow(0, 0, 0.0, tuple(range(5000)), (1, 2)), TraceRow(1, 0, 0.0, tuple(range(50)), (1, 2))]
    _, res = run(rows, "no_buffer", kv=1000, states=12)
    assert [r.status for r in res.records] == ["error", "ok"]
    assert res.aborted == 1


def test_host_tier_keeps_hits_that_a_small_device_cache_loses() -> None:
    rows = multi_turn_rows(sessions=8, turns=5)
    hits = {}
    for host in (0, 50_000):
        core, res = run(rows, "extra_buffer", kv=2_500, states=30, conc=2, host_kv_tokens=host, host_state_slots=64)
        assert all(r.status == "ok" for r in res.records)
        hits[host] = sum(r.cached_tokens for r in res.records)
        if host:
            assert core.host is not None and core.host.counters.load_backs > 0
    assert hits[50_000] > hits[0]


def test_lpm_schedules_the_request_with_the_longest_cached_prefix_first() -> None:
    shared = list(range(1000, 1600))
    warm = TraceRow(0, 0, 0.0, (*shared, 1), (5, 6))
    cold = [TraceRow(1 + i, 0, 0.0, tuple(range(5000 + 700 * i, 5600 + 700 * i)), (5, 6)) for i in range(3)]
    hot = TraceRow(9, 0, 0.0, (*shared, 1, 7, 7, 99), (5, 6))  # continues the warm request (sampled 7, 7)
    order = {}
    for policy in ("fcfs", "lpm"):
        cfg = EngineConfig(kv_tokens=100_000, state_slots=64, cache="no_buffer", schedule_policy=policy,
                           max_prefill_tokens=700, chunked_prefill_size=700)
        core = EngineCore(cfg)
        first = core.add_request(0, warm.input_tokens, 2)
        while first.status != "finished":  # cache the shared prefix first
            batch = core.schedule()
            assert batch is not None
            core.complete(batch, [7] * sum(1 for i in batch.items if batch.kind == "decode"
                                           or i.end == i.request.cached.input_len))  # type: ignore[union-attr]
        for i, row in enumerate([*cold, hot]):
            core.add_request(10 + i, row.input_tokens, 2)
        batch = core.schedule()
        assert batch is not None and batch.kind == "prefill"
        order[policy] = batch.items[0].request.rid
    assert order == {"fcfs": 10, "lpm": 13}


class FixedTimer:
    """Every forward takes one second: makes send and first-token times checkable by hand."""

    def batch_seconds(self, batch: object) -> float:
        return 1.0

    def frontend_seconds(self, prompt_tokens: int) -> float:
        return 0.0

    def host_transfer_seconds(self, tokens: int, states: int) -> float:
        return 0.0


def test_a_request_due_during_a_forward_is_sent_on_time_and_waits_in_ttft() -> None:
    rows = [TraceRow(0, 0, 0.0, tuple(range(100)), (1,)), TraceRow(1, 0, 0.5, tuple(range(200, 300)), (1,))]
    core = EngineCore(EngineConfig(kv_tokens=10_000, state_slots=16, cache="no_buffer"))
    res = simulate(rows, core, FixedTimer(), arrival_schedule(rows, LoadSpec("trace")))  # type: ignore[arg-type]
    late = res.records[1]
    assert late.sent_s == 0.5 and late.scheduled_s == 0.5  # the client sent it while prefill 1 ran
    assert late.first_token_s == 2.0 and late.ttft_ms == 1500.0  # it waited for the engine, not the client


def test_rejecting_the_last_requests_on_arrival_ends_the_simulation_cleanly() -> None:
    rows = [TraceRow(0, 0, 0.0, tuple(range(50)), (1, 2)), TraceRow(1, 0, 0.0, tuple(range(5000)), (1, 2))]
    core = EngineCore(EngineConfig(kv_tokens=300, state_slots=16, cache="no_buffer"))
    res = simulate(rows, core, FixedTimer(), arrival_schedule(rows, LoadSpec("closed", max_concurrency=4)))  # type: ignore[arg-type]
    assert [r.status for r in res.records] == ["ok", "error"]


def test_a_failed_turn_ends_its_session_and_its_later_turns_are_never_sent() -> None:
    # Session 0's second turn cannot fit the pool: its third is recorded once as skipped, never sent (it would
    # re-send an answer the engine never gave); session 1 runs on.
    rows = [TraceRow(0, 0, 0.0, tuple(range(50)), (1, 2)), TraceRow(1, 0, 0.0, tuple(range(100, 150)), (1, 2)),
            TraceRow(0, 1, 0.0, tuple(range(5000)), (1, 2)), TraceRow(1, 1, 0.0, tuple(range(100, 160)), (1, 2)),
            TraceRow(0, 2, 0.0, tuple(range(60)), (1, 2))]
    core = EngineCore(EngineConfig(kv_tokens=300, state_slots=16, cache="no_buffer"))
    res = simulate(rows, core, FixedTimer(), arrival_schedule(rows, LoadSpec("trace")))  # type: ignore[arg-type]
    by_turn = {(r.session_id, r.turn_id): r for r in res.records}
    assert {k: r.status for k, r in by_turn.items()} == {
        (0, 0): "ok", (1, 0): "ok", (0, 1): "error", (1, 1): "ok", (0, 2): "skipped"}
    skipped = by_turn[0, 2]
    assert skipped.sent_s is None and skipped.prompt_tokens == 0 and skipped.end_s is None
    assert skipped.error == "not sent: turn 1 of session 0 failed (error)"
    assert res.aborted == 1


def test_one_prefill_batch_reserves_room_for_what_it_already_admitted() -> None:
    core = EngineCore(EngineConfig(kv_tokens=1000, state_slots=64, cache="no_buffer", init_new_token_ratio=0.7))
    for i in range(10):
        core.add_request(i, tuple(range(100 * i, 100 * i + 50)), 200)
    batch = core.schedule()
    assert batch is not None and batch.kind == "prefill"
    # Each admitted request reserves its 200 outputs: 1000 tokens cannot carry all ten at once.
    assert 2 <= len(batch.items) <= 5


def test_host_load_back_respects_the_prefix_cap() -> None:
    from reference_impl.host_tier import HostTier
    from reference_impl.lifecycle import fingerprint, make_strategy
    from reference_impl.policies.registry import make_policy
    from reference_impl.radix.pools import KVPool, StatePool
    from reference_impl.radix.tree import MambaRadixTree

    host = HostTier(kv_tokens=1000, state_slots=8)
    prefix = list(range(150))
    host.write_back(prefix, fingerprint(prefix, 150))
    s = make_strategy("no_buffer", MambaRadixTree(KVPool(1000), StatePool(16), make_policy("lru")), host=host)
    req = s.admit([*prefix, 7, 8], max_prefix=20)
    assert req.prefix_len == 0  # the host's 150-token prefix lies past the cap: not loaded back
    s.release(req)
    req = s.admit([*prefix, 7, 8])
    assert req.prefix_len == 150
    s.release(req)


@pytest.mark.parametrize(("cache", "hit"), [("no_buffer", 246), ("extra_buffer", 192)])
def test_a_batch_cut_inside_a_shared_prefix_leaves_a_state_there(cache: str, hit: int) -> None:
    """Why no_buffer out-hits extra_buffer on the default engine's branching load (docs/evidence/branching.md).

    Two 266-token prompts sharing 250 tokens fill a 512-token chunk budget: the second is cut at 246, inside
    the shared prefix (SGLang 0.5.23 rounds a cut only with DCP: ``floor_chunked_tokens``). no_buffer
    checkpoints the cut exactly, so the group's next request hits 246 (the real 0.5.16 server does the same
    in fixtures/sglang-cpu/runs/smoke-0.5.16); extra_buffer keeps only the 64-token grid point below it.
    """
    core = EngineCore(EngineConfig(kv_tokens=32768, state_slots=256, cache=cache, chunked_prefill_size=512))  # type: ignore[arg-type]
    shared = list(range(1, 251))
    for rid in range(2):
        core.add_request(rid, shared + [1000 * (rid + 1) + i for i in range(16)], 4)
    batch = core.schedule()
    assert batch is not None and [(i.start, i.end) for i in batch.items] == [(0, 266), (0, 246)]
    core.complete(batch, [9])  # only the uncut prompt samples
    third = core.add_request(2, shared + [3000 + i for i in range(16)], 4)
    assert core.schedule() is not None
    assert third.cached_tokens == hit
