"""SGLang's own tree unit tests (https://github.com/sgl-project/sglang) and the CPU-oracle runs of the real cache
(docs/concepts/reference-cache.md), ported as scenarios with the outputs SGLang 0.5.23 printed."""

from __future__ import annotations

import pytest
from tree_harness import TreeHarness

from reference_impl.radix.invariants import check_invariants


def test_mamba_radix_cache_1_matches_sglang_0_5_23() -> None:
    harness = TreeHarness()
    tree = harness.tree
    expected_avail = [(19, 125), (18, 121), (17, 118), (16, 116)]
    keys = [[1, 2, 3], [1, 2, 3, 4, 5, 6, 7], [10, 11, 12], [1, 2, 3, 4, 5, 60, 70]]
    prefix_lens = []
    for key, (mamba_avail, full_avail) in zip(keys, expected_avail, strict=True):
        result = harness.insert(key)
        prefix_lens.append(result.prefix_len)
        assert not result.state_exists
        assert (tree.state_pool.available, tree.kv_pool.available) == (mamba_avail, full_avail)
    assert prefix_lens == [0, 3, 0, 5]  # insert frees the duplicate prefix slots

    # evict(num_tokens=1): the LRU leaf is [10,11,12], removed with its state.
    r = tree.evict(num_tokens=1)
    assert (r.tokens_evicted, r.states_evicted) == (3, 1)
    # evict(mamba_num=1): the least recent state is [1,2,3]'s, an internal node: tombstoned, KV kept.
    r = tree.evict(num_states=1)
    assert (r.tokens_evicted, r.states_evicted) == (0, 1)
    check_invariants(tree)

    m5 = tree.match_prefix([1, 2, 3, 4, 5])
    assert (m5.prefix_len, m5.kv_match_len, m5.branch_seqlen) == (0, 5, None)
    assert harness.match([1, 2, 3, 4, 5, 60, 70]) == (7, 2)
    assert harness.match([1, 2, 3, 4, 5, 6, 7]) == (7, 2)
    # The [60,70] state was refreshed before [6,7]'s, so it is now the LRU state: a leaf, deleted.
    r = tree.evict(num_states=1)
    assert (r.tokens_evicted, r.states_evicted) == (2, 1)
    assert harness.match([1, 2, 3, 4, 5, 60, 70]) == (0, 0)
    assert harness.match([1, 2, 3, 4, 5, 6, 7])[0] == 7
    assert (tree.kv_pool.available, tree.kv_evictable) == (121, 7)
    assert (tree.state_pool.available, tree.state_evictable) == (19, 1)


def test_shared_prefix_branch_point_is_chunk_aligned_kv_match() -> None:
    h = TreeHarness(kv=2048, states=20)
    prefix = list(range(1000, 1257))  # 257 tokens
    s1 = list(range(2000, 2256))
    s2 = list(range(3000, 3256))
    h.insert(prefix + s1)
    m = h.tree.match_prefix(prefix + s2)
    assert (m.prefix_len, m.kv_match_len, m.branch_seqlen) == (0, 257, 256)
    m = h.tree.match_prefix(prefix + s1)
    assert (m.prefix_len, m.branch_seqlen) == (513, None)
    m = h.tree.match_prefix([*prefix, *s1, 9, 9, 9])
    assert (m.prefix_len, m.branch_seqlen) == (513, None)
    # The first match split the edge at 257: a stateless parent over the 256-token leaf.
    (top,) = h.tree.root.children.values()
    assert (len(top.key), top.state) == (257, None)
    (leaf,) = top.children.values()
    assert len(leaf.key) == 256 and leaf.state is not None
    check_invariants(h.tree)


def test_match_refreshes_only_the_used_node_in_state_order() -> None:
    """SGLang #31643: re-matching b1 moves only b1; a1 stays older than a2, so a1 is dropped."""
    h = TreeHarness()
    for key in ([1, 2, 3], [1, 2, 3, 4, 5, 6], [7, 8, 9], [7, 8, 9, 10, 11, 12]):
        h.insert(key)
    h.match([1, 2, 3, 4, 5, 6])
    h.match([7, 8, 9, 10, 11, 12])
    h.match([1, 2, 3, 4, 5, 6])
    r = h.tree.evict(num_states=1)
    assert (r.tokens_evicted, r.states_evicted) == (0, 1)
    assert h.match([1, 2, 3])[0] == 0
    assert h.match([1, 2, 3, 4, 5, 6])[0] == 6
    assert h.match([7, 8, 9])[0] == 3
    assert h.match([7, 8, 9, 10, 11, 12])[0] == 6


def test_insert_prev_prefix_len_frees_only_unshared_duplicates() -> None:
    """SGLang test_insert_prev_prefix_len: free all, a partial span across nodes, and nothing."""
    h = TreeHarness(kv=64)
    h.insert([1, 2, 3, 4])
    h.insert([1, 2, 3, 4, 5, 6])
    avail = h.tree.kv_pool.available
    # A request that shares nothing with the tree allocated all 6 tokens: all 6 are duplicates.
    r = h.insert([1, 2, 3, 4, 5, 6, 7, 8])
    assert (r.prefix_len, r.duplicate_kv) == (6, 6)
    assert h.tree.kv_pool.available == avail - 8 + 6
    # Shares the first 2 tokens already: 4 duplicates across two nodes are freed.
    r = h.insert([1, 2, 3, 4, 5, 6, 7, 8, 9], prev_prefix_len=2)
    assert (r.prefix_len, r.duplicate_kv) == (8, 6)
    # Shares everything the tree has: nothing to free.
    r = h.insert([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], prev_prefix_len=9)
    assert (r.prefix_len, r.duplicate_kv) == (9, 0)


def test_insert_on_existing_state_reports_it_and_revives_tombstones() -> None:
    h = TreeHarness()
    h.insert([1, 2, 3])
    h.insert([1, 2, 3, 4])
    assert h.insert([1, 2, 3], prev_prefix_len=3).state_exists
    h.match([1, 2, 3, 4])  # [1,2,3] was refreshed by the insert; make it the least recent again
    h.tree.evict(num_states=1)  # tombstones [1,2,3] (least recent, internal)
    assert h.match([1, 2, 3])[0] == 0
    before = h.tree.state_pool.available
    r = h.insert([1, 2, 3], prev_prefix_len=3)
    assert not r.state_exists  # revived with the new state
    assert h.tree.state_pool.available == before - 1
    assert h.match([1, 2, 3])[0] == 3
    assert h.tree.insert([], 0).state_exists  # an empty key: (0, True) like SGLang


def test_locks_protect_paths_and_move_counters() -> None:
    h = TreeHarness()
    h.insert([1, 2, 3])
    h.insert([1, 2, 3, 4, 5])
    h.insert([9, 9])
    tree = h.tree
    m = tree.match_prefix([1, 2, 3, 4, 5, 6])
    handle = tree.lock(m.last_node)
    check_invariants(tree)
    assert (tree.kv_protected, tree.kv_evictable) == (5, 2)
    assert (tree.state_protected, tree.state_evictable) == (1, 2)
    # Everything evictable goes; the locked path and its state survive.
    r = tree.evict(num_tokens=100, num_states=100)
    check_invariants(tree)
    assert r.tokens_evicted == 2
    assert h.match([1, 2, 3, 4, 5])[0] == 5
    assert h.match([1, 2, 3])[0] == 0  # its state was droppable (only a KV lock on the ancestor)
    tree.unlock(handle)
    check_invariants(tree)
    r = tree.evict(num_tokens=100)
    assert r.tokens_evicted == 5 and tree.total_kv_tokens() == 0
    check_invariants(tree)


def test_page_size_aligns_matches_and_child_keys() -> None:
    h = TreeHarness(kv=256, page_size=4)
    h.insert(list(range(16)))
    m = h.tree.match_prefix([*range(10), 99, 99])  # diverges inside the third page
    assert m.kv_match_len == 8 and m.prefix_len == 0
    assert h.match(list(range(16)))[0] == 16
    assert h.match([*range(16), 1, 2, 3])[0] == 16  # the trailing partial page is ignored
    check_invariants(h.tree)


@pytest.mark.parametrize(("semantics", "freed"), [("0.5.9", 6), ("0.5.23", 2)])
def test_evicting_a_leaf_under_childless_tombstones(semantics: str, freed: int) -> None:
    """SGLang test_evict_iterative_tombstone_cleanup: 0.5.9 deletes the tombstones above an evicted
    leaf; 0.5.23 keeps them as KV-only leaves (its Full component alone decides survival)."""
    h = TreeHarness(semantics=semantics)
    h.insert([1, 2])
    h.insert([1, 2, 3, 4])
    h.insert([1, 2, 3, 4, 5, 6])
    h.insert([9])
    h.match([9])  # [9] becomes the most recent state; [1,2] and [1,2,3,4] are the two oldest
    r = h.tree.evict(num_states=2)  # both internal: tombstoned, KV kept
    assert (r.tokens_evicted, r.states_evicted) == (0, 2)
    r = h.tree.evict(num_tokens=1)  # the LRU leaf [5,6] goes
    assert (r.tokens_evicted, r.states_evicted) == (freed, 1)
    assert h.tree.total_kv_tokens() == 7 - freed
    m = h.tree.match_prefix([1, 2, 3, 4, 5])
    assert (m.prefix_len, m.kv_match_len) == (0, 4 if semantics == "0.5.23" else 0)
    r = h.tree.evict(num_tokens=100)  # KV-only leaves are KV-eviction candidates like any leaf
    assert h.tree.total_kv_tokens() == 0


def test_insert_ending_on_an_existing_state_refreshes_it() -> None:
    """Oracle divergence D2 (both versions): the existing state becomes the most recent."""
    for semantics in ("0.5.9", "0.5.23"):
        h = TreeHarness(kv=24, states=3, semantics=semantics)
        h.insert([0])
        h.insert([0, 0])
        assert h.insert([0], prev_prefix_len=1).state_exists
        r = h.tree.evict(num_states=1)
        assert (r.tokens_evicted, r.states_evicted) == (1, 1)  # leaf [0,0] goes, [0] keeps its state
        assert h.match([0])[0] == 1


def test_0_5_9_split_makes_the_lower_half_most_recent() -> None:
    """Oracle divergence D3: 0.5.9's _split_node re-adds the split child at the MRU end."""
    victims = {}
    for semantics in ("0.5.9", "0.5.23"):
        h = TreeHarness(kv=24, states=3, semantics=semantics)
        h.insert([0])
        h.insert([0, 0, 0])
        h.insert([1])
        h.tree.match_prefix([0, 0])  # splits [0,0] | [0] below [0]
        h.tree.evict(num_states=1)
        victims[semantics] = h.match([1])[0] == 0
    assert victims == {"0.5.9": True, "0.5.23": False}


def test_state_eviction_of_a_leaf_deletes_it_with_its_kv() -> None:
    """SGLang test_mamba_evict_cascades_on_full_leaf: a leaf cannot become a tombstone."""
    h = TreeHarness()
    h.insert([1, 2, 3])
    r = h.tree.evict(num_states=1)
    assert (r.tokens_evicted, r.states_evicted) == (3, 1)
    assert not h.tree.nodes and h.tree.kv_pool.available == 128


def test_locked_nodes_are_never_victims_in_either_order() -> None:
    h = TreeHarness()
    h.insert([1, 2, 3])
    h.insert([4, 5, 6])
    handle = h.tree.lock(h.tree.match_prefix([1, 2, 3]).last_node)
    r = h.tree.evict(num_tokens=100, num_states=100)
    assert (r.tokens_evicted, r.states_evicted) == (3, 1)
    assert h.match([1, 2, 3])[0] == 3
    h.tree.unlock(handle)
    assert h.tree.lru_leaf() is not None and h.tree.lru_state() is not None


def test_sglang_0_5_9_semantics_refresh_the_matched_chain_and_leave_duplicates() -> None:
    """The oracle's 0.5.9 runs: chain refresh evicts a2 (not a1); insert keeps duplicate KV."""
    h = TreeHarness(semantics="0.5.9")
    for key in ([1, 2, 3], [1, 2, 3, 4, 5, 6], [7, 8, 9], [7, 8, 9, 10, 11, 12]):
        h.insert(key)
    h.match([1, 2, 3, 4, 5, 6])
    h.match([7, 8, 9, 10, 11, 12])
    h.match([1, 2, 3, 4, 5, 6])
    h.tree.evict(num_states=1)
    assert h.match([1, 2, 3])[0] == 3
    assert h.match([7, 8, 9])[0] == 0

    h = TreeHarness(semantics="0.5.9")
    avail = []
    for key in ([1, 2, 3], [1, 2, 3, 4, 5, 6, 7], [10, 11, 12], [1, 2, 3, 4, 5, 60, 70]):
        tree = h.tree
        assert tree.kv_pool.alloc(len(key))
        slot = tree.state_pool.alloc()
        assert slot is not None
        tree.insert(key, slot)
        avail.append(tree.kv_pool.available)
    assert avail == [125, 118, 115, 108]
    # Its branching seqlen is reported even when it does not pass the reusable prefix.
    m = h.tree.match_prefix([1, 2, 3, 4, 5, 6, 7, 8])
    assert m.prefix_len == 7 and m.branch_seqlen is None  # 7 < one chunk of 64
