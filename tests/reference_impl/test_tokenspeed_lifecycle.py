"""TokenSpeed's strategy where no state slot can be freed for a request's next forward (lifecycle.tokenspeed).

A chunked prefill publishes each forward's checkpoint on its own path, where state eviction never looks; with
few state slots the next forward then finds none free. The scheduler waits there for ever; the reference runs
the forward without a checkpoint slot and counts the failure (``state_alloc_failures``), so the core never
wedges: ``schedule()`` returning None with a request still unfinished is what this file guards against.
These run without TokenSpeed's scheduler (tests/tokenspeed compares hits with it).
"""

from __future__ import annotations

from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore, EngineRequest

PAGE = 64


def run(core: EngineCore, requests: list[EngineRequest], limit: int = 1000) -> None:
    """Schedule and complete until idle; fail if the core plans nothing while requests are unfinished."""
    for step in range(limit):
        if core.idle:
            return
        batch = core.schedule()
        assert batch is not None, f"wedged at step {step}: {[(r.rid, r.status) for r in requests]}"
        sampling = [i for i in batch.items if batch.kind == "decode" or i.end == len(i.request.fill_tokens)]
        core.complete(batch, [900_000 + step] * len(sampling))
    raise AssertionError(f"not idle after {limit} steps")


def tokenspeed(state_slots: int) -> EngineCore:
    return EngineCore(EngineConfig(kv_tokens=63 * PAGE, state_slots=state_slots, cache="tokenspeed",
                                   page_size=PAGE, chunked_prefill_size=2 * PAGE, track_interval=PAGE,
                                   max_prefill_tokens=2 * PAGE))


def test_a_chunked_prefill_that_fills_the_state_pool_with_its_own_checkpoints_finishes() -> None:
    # 600 tokens in 128-token chunks with 4 slots: working + checkpoint + two published checkpoints on the
    # request's own path leave no slot for the fourth chunk's checkpoint.
    core = tokenspeed(4)
    reqs = [core.add_request(0, tuple(range(1, 601)), 4)]
    run(core, reqs)
    assert reqs[0].status == "finished"
    assert core.strategy.counters.state_alloc_failures > 0
    assert core.tree.state_pool.available + core.tree.total_states() == 4  # every slot is back or in the tree


def test_a_stalled_chunked_prefill_beside_a_short_request_finishes() -> None:
    core = tokenspeed(4)
    reqs = [core.add_request(0, tuple(range(1, 60)), 20), core.add_request(1, tuple(range(1000, 1600)), 4)]
    run(core, reqs)
    assert [r.status for r in reqs] == ["finished", "finished"]
    assert core.strategy.counters.state_alloc_failures > 0
    # the prompt's checkpoints published before the slots ran out stay in the tree: the same prompt hits again
    again = [core.add_request(2, tuple(range(1000, 1600)), 4)]
    run(core, again)
    assert again[0].cached_tokens and again[0].cached_tokens > 0
