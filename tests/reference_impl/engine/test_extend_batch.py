"""An extend batch is matched and locked request by request, then allocated once (SGLang's PrefillAdder, then
alloc_for_extend): the batch's state eviction never takes a state one of its own requests hits, and a chunked
prefill's later chunk evicts again where the release's alloc_req_slots does (tests/sglang_oracle/test_sglang_batch.py
checks the amounts against each release's own code). A decode step's KV is one allocation too."""

from __future__ import annotations

from typing import Literal

import pytest

from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore
from reference_impl.radix.invariants import check_invariants

SEEDS = [[100 * (i + 1) + j for j in range(8)] for i in range(6)]


def seeded(semantics: str, cache: Literal["no_buffer", "extra_buffer"] = "no_buffer", slots: int = 7,
           chunk: int = 8192) -> EngineCore:
    """Six 8-token prompts cached with a state each (the first the least recently used) in a pool of ``slots``."""
    core = EngineCore(EngineConfig(kv_tokens=4096, state_slots=slots, cache=cache, semantics=semantics,
                                   chunked_prefill_size=chunk))
    for seed in SEEDS:
        assert core.tree.kv_pool.alloc(len(seed))
        slot = core.tree.state_pool.alloc()
        assert slot is not None
        core.tree.insert(seed, slot)
    return core


@pytest.mark.parametrize("semantics", ["0.5.9", "0.5.16", "0.5.23"])
def test_a_batch_mate_keeps_the_hit_that_an_earlier_requests_eviction_would_take(semantics: str) -> None:
    core = seeded(semantics, slots=len(SEEDS) + 1)
    # A miss first, then a hit on the least recently used state: admitted one by one, the miss's eviction would
    # take that state before the hit is matched. SGLang matches and locks both before the batch evicts.
    miss = core.add_request(0, list(range(9000, 9010)), 1)
    hit = core.add_request(1, [*SEEDS[0], 1, 2], 1)
    batch = core.schedule()
    assert batch is not None and [i.request for i in batch.items] == [miss, hit]
    assert core.tree.total_states() < len(SEEDS)  # the batch evicted
    assert hit.cached_tokens == len(SEEDS[0])
    check_invariants(core.tree, held_kv_tokens=sum(r.cached.held_kv for r in (miss, hit) if r.cached),
                     held_states=[s for r in (miss, hit) if r.cached for s in r.cached.held_states()])


@pytest.mark.parametrize(("semantics", "evicts_again"), [("0.5.9", True), ("0.5.16", True), ("0.5.23", False)])
def test_a_chunked_prefills_later_chunk_evicts_again_where_alloc_req_slots_runs_per_batch(
    semantics: str, evicts_again: bool,
) -> None:
    core = seeded(semantics, cache="extra_buffer", slots=11, chunk=16)  # 16-token chunks track no state
    core.add_request(0, list(range(9000, 9040)), 1)
    first = core.schedule()
    assert first is not None and first.items[0].end == 16
    core.complete(first, [])
    states = core.tree.total_states()
    second = core.schedule()
    assert second is not None and second.items[0].start == 16
    assert (core.tree.total_states() < states) is evicts_again


@pytest.mark.parametrize("semantics", ["0.5.9", "0.5.16", "0.5.23"])
def test_a_decode_step_evicts_once_for_the_whole_step(semantics: str) -> None:
    # SGLang allocates a decode step's KV in one alloc_token_slots(tree_cache, bs) (0.5.9 mem_cache/common.py:437,
    # 0.5.16 mem_cache/allocation.py:554, 0.5.23 :640): short of it, 0.5.9 and 0.5.16 evict all bs tokens
    # (evict_from_tree_cache, 0.5.9 common.py:251-252), 0.5.23 the shortfall (allocator/base.py:166-168).
    seeds = [[100 * (i + 1), 100 * (i + 1) + 1] for i in range(10)]  # 2-token leaves: eviction frees 2 at a time
    core = EngineCore(EngineConfig(kv_tokens=100, state_slots=40, cache="no_buffer", semantics=semantics))
    for seed in seeds:
        assert core.tree.kv_pool.alloc(len(seed))
        slot = core.tree.state_pool.alloc()
        assert slot is not None
        core.tree.insert(seed, slot)
    reqs = [core.add_request(i, list(range(1000 * (i + 1), 1000 * (i + 1) + 10)), 5) for i in range(3)]
    prefill = core.schedule()
    assert prefill is not None and prefill.kind == "prefill" and len(prefill.items) == 3
    core.complete(prefill, [7, 7, 7])
    pool = core.tree.kv_pool
    assert pool.alloc(pool.available - 2)  # 2 tokens free, the step feeds 3
    step = core.schedule()
    assert step is not None and step.kind == "decode" and [i.request for i in step.items] == reqs
    demand, free = len(reqs), 2
    target = demand if semantics in ("0.5.9", "0.5.16") else demand - free
    leaves = -(-target // 2)  # whole 2-token seeds, oldest first
    assert [core.tree.match_prefix(s).prefix_len for s in seeds] == [0] * leaves + [2] * (len(seeds) - leaves)
    assert pool.available == free + 2 * leaves - demand
