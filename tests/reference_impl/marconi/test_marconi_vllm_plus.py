"""Behaviour of VllmPlusCache, Marconi's block-granular vLLM+ baseline."""

from __future__ import annotations

from toy_model import TOY

from reference_impl.marconi import VllmPlusCache

BIG = 10**12


def toks(start: int, n: int) -> tuple[int, ...]:
    return tuple(range(start, start + n))


def test_hits_end_on_block_boundaries() -> None:
    cache = VllmPlusCache(BIG, TOY, block_size=4)
    seq = toks(10, 10)
    assert cache.lookup(seq) == 0
    cache.admit(seq, ())
    assert cache.stats().states_admitted == 3  # blocks of 4, 4 and a partial 2
    # Diverging at token 9 keeps the two full blocks only.
    assert cache.lookup((*seq[:9], 999)) == 8
    # Diverging at token 6 keeps one block: a checkpoint exists every 4 tokens, unlike Marconi.
    assert cache.lookup((*seq[:6], 999)) == 4
    # The partial last block is reusable when the request extends the whole sequence.
    assert cache.lookup((*seq, 1, 2)) == 10


def test_partial_block_is_filled_before_new_blocks() -> None:
    cache = VllmPlusCache(BIG, TOY, block_size=4)
    seq = toks(10, 10)
    cache.lookup(seq)
    cache.admit(seq, ())
    cache.lookup(seq)
    cache.admit(seq, toks(50, 4))  # 14 tokens: fills block 3 to 4 tokens, opens a 2-token block
    assert cache.stats().states_admitted == 4
    assert cache.num_tokens == 14
    assert cache.lookup(seq + toks(50, 4) + (7,)) == 14
    assert cache.lookup(seq + toks(50, 1) + (7,)) == 8  # block 3 is no longer a 2-token block


def test_least_recent_leaf_goes_first_and_parents_follow() -> None:
    cache = VllmPlusCache(BIG, TOY, block_size=4)
    a, b = toks(100, 8), toks(200, 8)
    for seq in (a, b):
        cache.lookup(seq)
        cache.admit(seq, ())
    cache.lookup(a)  # refresh a's blocks
    size = cache.num_nodes * 50 + cache.num_tokens * 2
    cache.capacity_bytes = size
    # Marconi's estimate counts the root as a matched block: 12 new tokens are estimated as
    # 8 tokens and 2 states = 116 B, exactly b's two blocks (LRU leaf, then its parent).
    c = toks(300, 12)
    cache.lookup(c)
    cache.admit(c, ())
    assert cache.lookup((*a, 1)) == 8
    assert cache.lookup((*b, 1)) == 0
    assert cache.stats().states_evicted == 2


def test_space_estimate_is_one_block_short() -> None:
    cache = VllmPlusCache(BIG, TOY, block_size=4)
    cache.lookup(toks(100, 8))
    cache.admit(toks(100, 8), ())
    cache.capacity_bytes = cache.num_nodes * 50 + cache.num_tokens * 2
    one_block = toks(500, 4)
    cache.lookup(one_block)
    cache.admit(one_block, ())  # estimated at 0 B: nothing is evicted, capacity is exceeded
    assert cache.stats().states_evicted == 0
    assert cache.num_nodes * 50 + cache.num_tokens * 2 > cache.capacity_bytes


def test_deep_sequences_do_not_recurse() -> None:
    cache = VllmPlusCache(BIG, TOY, block_size=1)
    seq = toks(0, 5000)  # 5000 nested blocks: a recursive walk would overflow the stack
    cache.lookup(seq)
    cache.admit(seq, ())
    assert cache.lookup((*seq, 1)) == 5000
