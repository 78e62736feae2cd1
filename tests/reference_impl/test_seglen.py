"""SegLen eviction: the blog's worked example, distance to the nearest *live* state, and w=0 == LRU."""

from __future__ import annotations

import random

from tree_harness import TreeHarness

from reference_impl.models import get_model
from reference_impl.policies.registry import make_replay_cache
from reference_impl.replay.api import ReplayConfig
from reference_impl.replay.run import replay_rows
from workloads.trace import TraceRow


def depths_with_state(h: TreeHarness) -> set[tuple[int, ...]]:
    out = set()
    for n in h.tree.nodes.values():
        if n.state is not None and not n.children:
            out.add(n.key)
    return out


def test_blog_example_evicts_the_short_segment_then_falls_back_to_recency() -> None:
    # Candidates A, B, C, E inserted in that order; B is the only segment shorter than 3 tokens.
    a, b, c, e = (1, 1, 1), (2, 2), (3, 3, 3), (4, 4, 4)
    for policy, first, second in (("seglen", b, a), ("lru", a, b)):
        h = TreeHarness(policy=policy)
        for key in (a, b, c, e):
            h.insert(list(key))
        h.tree.evict(num_tokens=1)
        assert depths_with_state(h) == {a, b, c, e} - {first}
        h.tree.evict(num_tokens=1)
        assert depths_with_state(h) == {a, b, c, e} - {first, second}


def test_segment_length_is_measured_to_the_nearest_ancestor_that_still_has_a_state() -> None:
    prefix = [9] * 10
    x, y, z = (*prefix, 1, 1), (5,) * 5, (6,) * 5
    victims = {}
    for tombstone_prefix in (False, True):
        h = TreeHarness(policy="seglen")
        h.insert(prefix)
        h.insert(list(x))  # oldest leaf: 2 tokens past the prefix's state
        if tombstone_prefix:
            h.tree.evict(num_states=1)  # the prefix is the least recent state and internal
            assert h.match(prefix)[0] == 0
        h.insert(list(y))
        h.insert(list(z))
        before = depths_with_state(h)
        h.tree.evict(num_tokens=1)
        (victims[tombstone_prefix],) = before - depths_with_state(h)
    assert victims[False] == (1, 1)  # short replay from a live state and least recent: it goes
    assert victims[True] == y  # now x would replay all 12 tokens, so a 5-token leaf goes instead


def test_zero_weight_is_exactly_lru_on_a_trace_with_evictions() -> None:
    rng = random.Random(3)
    rows = []
    shared = [rng.randrange(1000) for _ in range(400)]
    for s in range(12):
        history = shared[: rng.randint(100, 400)] + [rng.randrange(1000) for _ in range(300)]
        for t in range(5):
            history = history + [rng.randrange(1000) for _ in range(rng.randint(20, 200))]
            out = [rng.randrange(1000) for _ in range(rng.randint(5, 80))]
            rows.append(TraceRow(s, t, s * 0.3 + t * 2.0, tuple(history), tuple(out)))
            history = history + out
    model = get_model("marconi-7b")
    for strategy in ("no_buffer", "extra_buffer"):
        cfg = ReplayConfig(capacity_bytes=int(1e9), model=model, strategy=strategy, eff_weight=0.0)
        lru = replay_rows("lru", rows, make_replay_cache("lru", cfg), model)
        seg0 = replay_rows("seglen", rows, make_replay_cache("seglen", cfg), model)
        assert lru.states_evicted > 0
        assert (seg0.hit_tokens, seg0.states_evicted) == (lru.hit_tokens, lru.states_evicted)
        seg = replay_rows(
            "seglen", rows, make_replay_cache("seglen", ReplayConfig(int(1e9), model, strategy, eff_weight=2.0)), model
        )
        assert seg.hit_tokens != lru.hit_tokens  # the weight changes decisions on this trace
