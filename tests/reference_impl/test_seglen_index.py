"""SegLen's index picks exactly the full scan's victim: on random operation sequences, at every eviction."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl.policies.base import TreeView
from reference_impl.policies.seglen import SeglenPolicy
from reference_impl.policies.seglen_index import OrderIndex
from reference_impl.radix.invariants import check_invariants
from reference_impl.radix.node import Node
from reference_impl.radix.pools import KVPool, StatePool
from reference_impl.radix.results import LockHandle
from reference_impl.radix.tree import SGLANG_SEMANTICS, MambaRadixTree

tokens = st.lists(st.integers(0, 3), min_size=1, max_size=14)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), tokens),
        st.tuples(st.just("lock"), tokens),
        st.tuples(st.just("unlock"), st.integers(0, 10)),
        st.tuples(st.just("evict_kv"), st.integers(1, 8)),
        st.tuples(st.just("evict_states"), st.integers(1, 3)),
    ),
    max_size=60,
)


def brute_seglen(node: Node) -> int:
    walk = node.parent
    while walk is not None and walk.parent is not None and walk.state is None:
        walk = walk.parent
    return node.depth - (walk.depth if walk is not None and walk.parent is not None else 0)


class CheckedSeglen(SeglenPolicy):
    """Every victim is picked both ways, and the index must agree with a fresh look at the tree."""

    picks = 0

    def _check(self, tree: TreeView, *, by_kv: bool) -> Node | None:
        live = tree.evictable_leaves if by_kv else tree.evictable_states
        full = self._pick(tree, list(live.values()), by_kv=by_kv)
        fast = self._indexed(tree, by_kv=by_kv)
        assert fast is full
        if len(live) >= 2:
            assert isinstance(tree.policy_state, tuple)
            index: OrderIndex = tree.policy_state[0 if by_kv else 1]
            assert index.entry == {
                nid: (brute_seglen(n), n.kv_tick if by_kv else n.state_tick) for nid, n in live.items()
            }
            assert index.by_seg == sorted((seg, nid) for nid, (seg, _) in index.entry.items())
            assert index.by_tick == sorted((tick, nid) for nid, (_, tick) in index.entry.items())
            CheckedSeglen.picks += 1
        return fast

    def kv_victim(self, tree: TreeView) -> Node | None:
        return self._check(tree, by_kv=True)

    def state_victim(self, tree: TreeView) -> Node | None:
        return self._check(tree, by_kv=False)


def run(ops: list[tuple[str, object]], semantics: str, weight: float) -> None:
    tree = MambaRadixTree(KVPool(48), StatePool(10), CheckedSeglen(weight), chunk_size=4, semantics=semantics)
    assert tree.changed_leaves is not None  # seglen asks for the logs
    locks: list[LockHandle] = []
    for op, arg in ops:
        if op in ("insert", "lock"):
            assert isinstance(arg, list)
            key = tuple(arg)
            if op == "lock":
                locks.append(tree.lock(tree.match_prefix(key).last_node))
                continue
            if not tree.kv_pool.alloc(len(key)):
                tree.evict(num_tokens=len(key) - tree.kv_pool.available)
                if not tree.kv_pool.alloc(len(key)):
                    continue
            slot = tree.state_pool.alloc()
            if slot is None:
                tree.evict(num_states=1)
                slot = tree.state_pool.alloc()
            if slot is None:
                tree.kv_pool.free(len(key))
                continue
            r = tree.insert(key, slot)
            if semantics == "0.5.9":
                tree.kv_pool.free(r.duplicate_kv)
            if r.state_exists:
                tree.state_pool.free(slot)
        elif op == "unlock":
            assert isinstance(arg, int)
            if locks:
                tree.unlock(locks.pop(arg % len(locks)))
        else:
            assert isinstance(arg, int)
            tree.evict(num_tokens=arg) if op == "evict_kv" else tree.evict(num_states=arg)
        check_invariants(tree)


@settings(max_examples=200, deadline=None)
@given(ops=ops, semantics=st.sampled_from(SGLANG_SEMANTICS), weight=st.sampled_from([0.0, 0.3, 0.85, 3.0, 1e6]))
def test_the_index_picks_the_full_scans_victim(ops: list[tuple[str, object]], semantics: str, weight: float) -> None:
    run(ops, semantics, weight)


def test_a_long_random_sequence_picks_among_many_candidates() -> None:
    # Hypothesis keeps sequences short; this one grows a bushy tree, so most picks weigh many candidates.
    rng = random.Random(7)
    seq: list[tuple[str, object]] = []
    for _ in range(3000):
        kind = rng.choices(["insert", "lock", "unlock", "evict_kv", "evict_states"], [8, 2, 2, 1, 1])[0]
        if kind in ("insert", "lock"):
            seq.append((kind, [rng.randrange(3) for _ in range(rng.randint(1, 14))]))
        else:
            seq.append((kind, rng.randint(1, 6)))
    CheckedSeglen.picks = 0
    for semantics in SGLANG_SEMANTICS:
        run(seq, semantics, 0.85)
    assert CheckedSeglen.picks > 1000


def test_a_tombstone_re_measures_its_descendants() -> None:
    # prefix (state) -> a, b (states). Tombstoning the prefix makes a and b replay from the root: both re-logged.
    tree = MambaRadixTree(KVPool(100), StatePool(10), SeglenPolicy(0.0), chunk_size=4)  # 0.0: by recency alone
    for key in ((1, 1, 1, 1), (1, 1, 1, 1, 2, 2), (1, 1, 1, 1, 3, 3, 3)):
        shared = 4 if len(key) > 4 else 0
        slot = tree.state_pool.alloc()
        assert slot is not None and tree.kv_pool.alloc(len(key) - shared)
        tree.insert(key, slot, prev_prefix_len=shared)
    assert tree.changed_leaves is not None and tree.changed_states is not None
    tree.policy.kv_victim(tree)  # a pick reads (and empties) the logs without changing the tree
    tree.policy.state_victim(tree)
    assert not tree.changed_leaves and not tree.changed_states
    prefix = tree.root.children[1]
    tree.evict(num_states=1)  # the prefix is the least recent state and has children: a tombstone
    assert prefix.state is None
    logged = {n.key for n in tree.changed_leaves.values() if n is not None}
    assert logged == {(2, 2), (3, 3, 3)}
    a, b = prefix.children.values()
    assert (brute_seglen(a), brute_seglen(b)) == (6, 7)
