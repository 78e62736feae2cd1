"""Random operation sequences against a brute-force model of what the tree must contain.

The model keeps two sets of token tuples: prefixes whose KV is cached (K) and prefixes that end on a
state (S). Insert adds every prefix of the key to K and the key to S; a match is the longest prefix of
the query in S, the KV match the longest in K. Evictions may only remove: the model is re-read
from the tree after one and checked to have shrunk by exactly what the eviction reported, and the
victims must be the least recent candidates that a linear scan finds.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl.policies.registry import make_policy
from reference_impl.radix.invariants import check_invariants
from reference_impl.radix.node import Node
from reference_impl.radix.pools import KVPool, StatePool
from reference_impl.radix.results import LockHandle
from reference_impl.radix.tree import SGLANG_SEMANTICS, MambaRadixTree

Key = tuple[int, ...]

tokens = st.lists(st.integers(0, 3), min_size=1, max_size=12)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), tokens),
        st.tuples(st.just("match"), tokens),
        st.tuples(st.just("lock"), tokens),
        st.tuples(st.just("unlock"), st.integers(0, 10)),
        st.tuples(st.just("evict_kv"), st.integers(1, 6)),
        st.tuples(st.just("evict_states"), st.integers(1, 3)),
    ),
    max_size=40,
)


def content(tree: MambaRadixTree) -> tuple[set[Key], set[Key]]:
    """(K, S) as the tree holds them; K has page-aligned prefixes (a page is the unit of KV)."""
    page = tree.page_size
    kv: set[Key] = set()
    states: set[Key] = set()
    stack: list[tuple[Node, Key]] = [(tree.root, ())]
    while stack:
        node, path = stack.pop()
        for child in node.children.values():
            full = path + child.key
            kv.update(full[:i] for i in range(len(path) + page, len(full) + 1, page))
            if child.state is not None:
                states.add(full)
            stack.append((child, full))
    return kv, states


def longest_in(query: Key, members: set[Key], page: int) -> int:
    best = 0
    for n in range(page, len(query) + 1, page):
        if query[:n] in members:
            best = n
    return best


def brute_leaf_victim(tree: MambaRadixTree) -> Node | None:
    cands = [n for n in tree.nodes.values() if not n.children and n.kv_lock == 0]
    return min(cands, key=lambda n: (n.kv_tick, n.depth, n.id), default=None)


def brute_state_victim(tree: MambaRadixTree) -> Node | None:
    cands = [
        n for n in tree.nodes.values() if n.state is not None and n.state_lock == 0 and (n.children or n.kv_lock == 0)
    ]
    return min(cands, key=lambda n: (n.state_tick, n.depth, n.id), default=None)


@settings(max_examples=300, deadline=None)
@given(ops=ops, page=st.sampled_from([1, 2]), semantics=st.sampled_from(SGLANG_SEMANTICS))
def test_random_operations_agree_with_the_brute_force_model(
    ops: list[tuple[str, object]], page: int, semantics: str
) -> None:
    tree = MambaRadixTree(
        KVPool(64), StatePool(12), make_policy("lru"), page_size=page, chunk_size=4, semantics=semantics
    )
    kv_model: set[Key] = set()
    state_model: set[Key] = set()
    locks: list[LockHandle] = []
    for op, arg in ops:
        if op in ("insert", "match", "lock"):
            assert isinstance(arg, list)
            key = tuple(arg[: len(arg) // page * page])
        if op == "insert":
            if not key or not tree.kv_pool.alloc(len(key)):
                continue
            slot = tree.state_pool.alloc()
            if slot is None:
                tree.kv_pool.free(len(key))
                continue
            r = tree.insert(key, slot)
            if semantics == "0.5.9":
                tree.kv_pool.free(r.duplicate_kv)
            assert r.prefix_len == longest_in(key, kv_model, page)
            assert r.state_exists == (key in state_model)
            if r.state_exists:
                tree.state_pool.free(slot)
            kv_model.update(key[:i] for i in range(page, len(key) + 1, page))
            state_model.add(key)
        elif op in ("match", "lock"):
            m = tree.match_prefix(key)
            assert m.prefix_len == longest_in(key, state_model, page)
            assert m.kv_match_len == longest_in(key, kv_model, page)
            aligned = m.kv_match_len // tree.chunk_size * tree.chunk_size
            floor = m.prefix_len if semantics == "0.5.23" else 0
            assert m.branch_seqlen == (aligned if aligned > floor and m.kv_match_len > m.prefix_len else None)
            if op == "lock":
                locks.append(tree.lock(m.last_node))
        elif op == "unlock":
            assert isinstance(arg, int)
            if locks:
                tree.unlock(locks.pop(arg % len(locks)))
        else:
            assert isinstance(arg, int)
            expected = brute_leaf_victim(tree) if op == "evict_kv" else brute_state_victim(tree)
            first = tree.lru_leaf() if op == "evict_kv" else tree.lru_state()
            assert first is expected
            r = tree.evict(num_tokens=arg) if op == "evict_kv" else tree.evict(num_states=arg)
            new_kv, new_states = content(tree)
            assert new_kv <= kv_model and new_states <= state_model
            assert r.tokens_evicted == page * len(kv_model - new_kv)
            assert r.states_evicted == len(state_model - new_states)
            wanted = r.tokens_evicted if op == "evict_kv" else r.states_evicted
            if wanted < arg:  # stopped early: nothing was left to pick
                assert (brute_leaf_victim(tree) if op == "evict_kv" else brute_state_victim(tree)) is None
            kv_model, state_model = new_kv, new_states
        check_invariants(tree)
        assert content(tree) == (kv_model, state_model)
    for handle in reversed(locks):
        tree.unlock(handle)
    check_invariants(tree)
    tree.evict(num_tokens=10**6)
    assert tree.total_kv_tokens() == 0 and tree.kv_pool.available == 64
    assert tree.state_pool.available == 12
