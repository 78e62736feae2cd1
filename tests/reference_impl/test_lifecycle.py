"""Request-level caching per strategy: where states land and what later requests can reuse."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from reference_impl.lifecycle import CachedRequest, Strategy, fingerprint, make_strategy
from reference_impl.policies.registry import make_policy
from reference_impl.radix.invariants import check_invariants
from reference_impl.radix.pools import KVPool, PoolExhausted, StatePool
from reference_impl.radix.tree import MambaRadixTree


def build(strategy: str, *, kv: int = 1 << 16, states: int = 64, page_size: int = 1, **kw: object) -> Strategy:
    tree = MambaRadixTree(KVPool(kv), StatePool(states), make_policy("lru"), page_size=page_size)
    return make_strategy(strategy, tree, **kw)


def serve(s: Strategy, inputs: Sequence[int], outputs: Sequence[int]) -> int:
    """Run one request to completion; return its cached tokens. Invariants hold at every step."""
    req = s.admit(inputs)
    check_invariants(s.tree, held_kv_tokens=req.held_kv, held_states=req.held_states())
    s.prefill(req, finishes_after_prefill=len(outputs) <= 1)
    check_invariants(s.tree, held_kv_tokens=req.held_kv, held_states=req.held_states())
    s.decode(req, outputs)
    check_invariants(s.tree, held_kv_tokens=req.held_kv, held_states=req.held_states())
    s.finish(req)
    check_invariants(s.tree)
    return req.prefix_len


PREFIX = [7] * 257  # SGLang's PrefixCacheBranchingMixin: a 257-token prefix, three 256-token suffixes
SUFFIXES = [[100 + i] * 256 for i in range(3)]


def test_extra_buffer_third_request_sharing_a_prefix_hits_chunk_aligned() -> None:
    s = build("extra_buffer")
    cached = [serve(s, PREFIX + suffix, [5]) for suffix in SUFFIXES]
    assert cached == [0, 0, 257 // 64 * 64]


def test_no_buffer_never_hits_a_shared_prefix_without_a_state() -> None:
    s = build("no_buffer")
    cached = [serve(s, PREFIX + suffix, [5]) for suffix in SUFFIXES]
    assert cached == [0, 0, 0]


@pytest.mark.parametrize("strategy", ["no_buffer", "extra_buffer"])
def test_multi_turn_reuses_previous_input_and_output(strategy: str) -> None:
    s = build(strategy, track_interval=64)
    turn1 = list(range(1, 301))
    out1 = list(range(1000, 1100))
    serve(s, turn1, out1)
    turn2 = turn1 + out1 + [42] * 50
    cached = serve(s, turn2, [1, 2])
    committed = len(turn1) + len(out1) - 1  # the last sampled token never got KV
    if strategy == "no_buffer":
        assert cached == committed
    else:
        # Decode tracked states every 64 tokens; the last one at or below the committed length.
        assert cached == committed // 64 * 64


def test_no_buffer_checkpoints_every_prefill_chunk() -> None:
    s = build("no_buffer", chunked_prefill_size=128)
    serve(s, list(range(300)), [1, 2, 3])
    # States at 128, 256, 300 (chunk ends) and 302 (finish: 300 + 3 - 1).
    depths = sorted(n.depth for n in s.tree.nodes.values() if n.state is not None)
    assert depths == [128, 256, 300, 302]
    assert s.counters.states_inserted == 4


def test_extra_buffer_tracks_only_chunk_aligned_positions() -> None:
    s = build("extra_buffer", chunked_prefill_size=128, track_interval=256)
    serve(s, list(range(300)), [1] * 10)
    depths = sorted(n.depth for n in s.tree.nodes.values() if n.state is not None)
    # Forward [0,128) tracks 128, [128,256) tracks 256, [256,300) is shorter than a chunk: nothing.
    # Decode 300..309 crosses no multiple of 256, so the finish caches nothing more.
    assert depths == [128, 256]
    assert s.tree.total_kv_tokens() == 256  # KV past the last tracked state was freed


def test_cow_gives_the_request_exactly_the_matched_state() -> None:
    s = build("no_buffer")
    seq = list(range(50))
    serve(s, seq, [60, 61])
    req = s.admit([*seq, 60, 61, 62])
    assert req.prefix_len == 51
    assert req.live_state is not None
    assert s.tree.state_pool.content[req.live_state] == fingerprint([*seq, 60, 61], 51)
    s.release(req)
    check_invariants(s.tree)


@pytest.mark.parametrize("semantics", ["0.5.9", "0.5.23"])
def test_admission_evicts_for_the_request_without_losing_the_hit(semantics: str) -> None:
    tree = MambaRadixTree(KVPool(1 << 16), StatePool(6), make_policy("lru"), semantics=semantics)
    s = make_strategy("no_buffer", tree)
    for base in range(0, 500, 100):
        serve(s, list(range(base, base + 20)), [1])
    free_before, states_before = tree.state_pool.available, tree.total_states()
    assert free_before < 3  # a tight pool: the 0.5.9 budget must evict
    hit = list(range(400, 420))  # the newest request's prompt; its state must survive admission
    req = s.admit([*hit, 7])
    assert req.prefix_len == 20
    if semantics == "0.5.9":
        # alloc_req_slots' budget: 3 slots free besides the COW slot the hit already took.
        assert tree.state_pool.available == 3 and tree.total_states() < states_before
    else:
        # 0.5.23's ensure_mamba_capacity: take a free slot for the COW copy, evict nothing.
        assert free_before >= 1
        assert tree.state_pool.available == free_before - 1 and tree.total_states() == states_before
    s.release(req)
    check_invariants(s.tree)


def test_pool_exhaustion_raises_cleanly_and_leaks_nothing() -> None:
    s = build("no_buffer", kv=64)
    req = s.admit(list(range(100)))
    with pytest.raises(PoolExhausted):
        s.prefill(req, finishes_after_prefill=False)
    s.release(req)
    check_invariants(s.tree)
    assert s.tree.kv_pool.available == 64


@pytest.mark.parametrize(("page_size", "expected"), [(1, 320), (16, 320), (128, 256)])
def test_branch_point_granularity_is_max_of_chunk_and_page(page_size: int, expected: int) -> None:
    s = build("extra_buffer", page_size=page_size)
    prefix = [3] * 330
    cached = [serve(s, prefix + [200 + i] * 256, [5]) for i in range(3)]
    assert cached == [0, 0, expected]
    assert all(n.depth % page_size == 0 for n in s.tree.nodes.values())


def test_disabled_cache_never_hits_and_keeps_nothing() -> None:
    s = build("disabled")
    seq = list(range(100))
    assert serve(s, seq, [1, 2, 3]) == 0
    assert serve(s, [*seq, 1, 2, 3, 4], [5]) == 0
    assert not s.tree.nodes and s.tree.kv_pool.available == s.tree.kv_pool.size


@pytest.mark.parametrize("make_input", [tuple, list], ids=["tuple", "list"])
def test_request_fingerprint_and_prefix_equal_the_plain_ones_across_the_input_output_boundary(
    make_input: type[Sequence[int]],
) -> None:
    # A request hashes blocks inside its input from input_tuple and the rest from its growing token list;
    # a state's content must not depend on which, or on the order positions are fingerprinted in.
    input_tokens = [(7 * i + 3) % 997 for i in range(700)]
    output = [(11 * i + 5) % 991 for i in range(400)]
    req = CachedRequest.of(make_input(input_tokens))  # type: ignore[call-arg]
    whole = [*input_tokens, *output]
    for n in (0, 255, 256, 511, 512, 699, 700):
        assert req.fingerprint(n) == fingerprint(whole, n)
        assert list(req.prefix(n)) == whole[:n]
    req.tokens.extend(output)
    for n in (700, 767, 768, 1024, 1099, 1100, 300):
        assert req.fingerprint(n) == fingerprint(whole, n)
        assert list(req.prefix(n)) == whole[:n]
    assert fingerprint(whole, 768) != fingerprint([*input_tokens, *output[:67], 0], 768)


@pytest.mark.parametrize(("semantics", "depths"), [
    # 0.5.23 decode-tracks where a checkpoint can be named: multiples of lcm(chunk 64, interval 100) = 1600, so
    # decode 384..509 tracks nothing; 0.5.16 tracks at multiples of the interval itself: 400 and 500.
    ("0.5.23", [128, 256, 384]),
    ("0.5.16", [128, 256, 384, 500]),
])
def test_decode_tracks_on_the_chunk_and_interval_grid_as_the_release_does(semantics: str, depths: list[int]) -> None:
    tree = MambaRadixTree(KVPool(1 << 16), StatePool(64), make_policy("lru"), semantics=semantics)
    s = make_strategy("extra_buffer", tree, chunked_prefill_size=128, track_interval=100)
    serve(s, list(range(401)), [1] * 110)
    assert sorted(n.depth for n in s.tree.nodes.values() if n.state is not None) == depths


@pytest.mark.parametrize(("semantics", "overlap", "prompt", "outputs", "depths"), [
    # 0.5.16 with overlap books the track at 256 on the step committing 255 (the look-ahead batch tracks 256 and
    # holds its KV): a request ending there (200 + 56 tokens) caches 256, its last sampled token with it ...
    ("0.5.16", True, 200, 56, [192, 256]),
    ("0.5.16", False, 200, 56, [192]),
    ("0.5.16", False, 200, 57, [192, 256]),
    ("0.5.23", True, 200, 56, [192]),
    # ... and never books a track at the first decode step (prompt + 1): only the prefill's result precedes it.
    ("0.5.16", True, 255, 3, [192]),
    ("0.5.16", False, 255, 3, [192, 256]),
    ("0.5.16", True, 255, 300, [192, 512]),
])
def test_0_5_16_overlap_books_decode_tracks_one_step_early(semantics: str, overlap: bool, prompt: int, outputs: int,
                                                           depths: list[int]) -> None:
    tree = MambaRadixTree(KVPool(1 << 16), StatePool(64), make_policy("lru"), semantics=semantics)
    s = make_strategy("extra_buffer", tree, chunked_prefill_size=None, track_interval=256, overlap=overlap)
    serve(s, list(range(prompt)), list(range(1000, 1000 + outputs)))  # KV and slots balance at every step
    assert sorted(n.depth for n in s.tree.nodes.values() if n.state is not None) == depths
    assert s.tree.kv_pool.size - s.tree.kv_pool.available == depths[-1]  # the cached tokens' KV, nothing leaked


@pytest.mark.parametrize(("semantics", "copies"), [("0.5.9", 1), ("0.5.16", 0), ("0.5.23", 0)])
def test_extra_buffer_checkpoint_forks_on_0_5_9_and_donates_later(semantics: str, copies: int) -> None:
    """0.5.9's cache_unfinished_req puts a copy of the tracked state into the tree and keeps the ping-pong pair;
    later releases hand the tracked slot itself over and take a fresh one. Either way the request holds as many
    slots as before and the tree holds the state at the tracked position."""
    tree = MambaRadixTree(KVPool(1 << 16), StatePool(64), make_policy("lru"), semantics=semantics)
    s = make_strategy("extra_buffer", tree, chunked_prefill_size=128, track_interval=256, overlap=False)
    req = s.admit(list(range(300)))
    pair = list(req.track_slots)
    assert len(pair) == (2 if semantics == "0.5.9" else 1)
    s.prefill_chunk(req, 128, finishes_after_prefill=False)
    before = s.counters.state_copies
    s.prefill_chunk(req, 256, finishes_after_prefill=False)
    assert s.counters.state_copies - before == 1 + copies  # the forward's track, then the fork
    assert len(req.held_states()) == 1 + len(pair)
    assert (req.track_slots == pair) == (semantics == "0.5.9")
    node = max((n for n in tree.nodes.values() if n.state is not None), key=lambda n: n.depth)
    assert node.depth == 256 and tree.state_pool.content[node.state] == req.fingerprint(256)
    check_invariants(tree, held_kv_tokens=req.held_kv, held_states=req.held_states())
