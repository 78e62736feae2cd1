"""Executable invariants of the SGLang-model tree (https://github.com/sgl-project/sglang), for tests.

``check_invariants`` recomputes every derived fact from the node structure and compares it with what
the tree maintains incrementally. Tests call it after every operation.
"""

from __future__ import annotations

from collections.abc import Iterable

from reference_impl.radix.key import child_key
from reference_impl.radix.node import Node
from reference_impl.radix.tree import MambaRadixTree

__all__ = ["InvariantError", "check_invariants"]


class InvariantError(AssertionError):
    pass


def _fail(msg: str) -> None:
    raise InvariantError(msg)


def check_invariants(
    tree: MambaRadixTree, *, held_kv_tokens: int = 0, held_states: Iterable[int] = ()
) -> None:
    """Raise InvariantError on the first violated invariant.

    ``held_kv_tokens`` and ``held_states`` are what requests hold outside the tree, so that pool
    accounting can be closed: available + evictable + protected + held == pool size.
    """
    root = tree.root
    ps = tree.page_size
    seen: dict[int, Node] = {}
    kv_evictable = kv_protected = st_evictable = st_protected = 0
    tree_states: list[int] = []
    stack = [root]
    while stack:
        node = stack.pop()
        for ck, child in node.children.items():
            if child.parent is not node:
                _fail(f"{child} hangs under {node} but points to {child.parent}")
            if not child.key or len(child.key) % ps:
                _fail(f"{child}: edge of {len(child.key)} tokens is empty or not page-aligned ({ps})")
            if child_key(child.key, 0, ps) != ck:
                _fail(f"{child}: stored under child key {ck!r}, edge starts {child.key[:ps]!r}")
            if child.depth != node.depth + len(child.key):
                _fail(f"{child}: depth {child.depth} != parent depth {node.depth} + edge {len(child.key)}")
            if child.id in seen:
                _fail(f"{child} reachable twice")
            seen[child.id] = child
            stack.append(child)
        if node is root:
            continue
        # 1. Tombstones exist only as internal nodes (0.5.9; 0.5.23 keeps KV-only leaves).
        if not node.children and node.state is None and tree.semantics == "0.5.9":
            _fail(f"{node}: a leaf without a state (tombstone leaf)")
        # 2. Lock shape: KV locks cover whole paths; a state lock implies a KV lock on the node.
        if node.kv_lock < 0 or node.state_lock < 0 or node.kv_lock < node.state_lock:
            _fail(f"{node}: lock counts invalid (kv_lock must be >= state_lock >= 0)")
        if node.state_lock and node.state is None:
            _fail(f"{node}: state-locked but holds no state")
        parent = node.parent
        assert parent is not None
        if parent is not root and parent.kv_lock < node.kv_lock:
            _fail(f"{node}: KV lock {node.kv_lock} exceeds its parent's {parent.kv_lock}")
        # 4. Evictable/protected counters are recounts over lock state.
        if node.kv_lock:
            kv_protected += len(node.key)
        else:
            kv_evictable += len(node.key)
        if node.state is not None:
            tree_states.append(node.state)
            if node.state_lock:
                st_protected += 1
            else:
                st_evictable += 1
        # 3. Candidate sets of the two orders.
        is_leaf_candidate = node.kv_lock == 0 and not node.children
        if is_leaf_candidate != (node.id in tree.evictable_leaves):
            _fail(f"{node}: evictable-leaf membership is {not is_leaf_candidate}, expected {is_leaf_candidate}")
        is_state_candidate = (
            node.state is not None and node.state_lock == 0 and (bool(node.children) or node.kv_lock == 0)
        )
        if is_state_candidate != (node.id in tree.evictable_states):
            _fail(f"{node}: evictable-state membership wrong (expected {is_state_candidate})")
    if seen.keys() != tree.nodes.keys():
        _fail(f"node registry ({len(tree.nodes)}) differs from reachable nodes ({len(seen)})")
    if (kv_evictable, kv_protected) != (tree.kv_evictable, tree.kv_protected):
        _fail(
            f"KV counters evictable/protected {tree.kv_evictable}/{tree.kv_protected}, "
            f"recount {kv_evictable}/{kv_protected}"
        )
    if (st_evictable, st_protected) != (tree.state_evictable, tree.state_protected):
        _fail(
            f"state counters evictable/protected {tree.state_evictable}/{tree.state_protected}, "
            f"recount {st_evictable}/{st_protected}"
        )
    # Every candidate is reachable from its LRU heap with its current key.
    kv_keys = set(tree._kv_heap)
    for node in tree.evictable_leaves.values():
        if (node.kv_tick, node.depth, node.id) not in kv_keys:
            _fail(f"{node}: evictable leaf missing from the KV heap")
    st_keys = set(tree._state_heap)
    for node in tree.evictable_states.values():
        if (node.state_tick, node.depth, node.id) not in st_keys:
            _fail(f"{node}: evictable state missing from the state heap")
    # 6. Pool accounting closes.
    held = list(held_states)
    all_states = tree_states + held
    if len(set(all_states)) != len(all_states):
        _fail("a state slot is owned twice (tree and/or requests)")
    for slot in all_states:
        if not tree.state_pool.is_allocated(slot):
            _fail(f"state slot {slot} is in use but not allocated in the pool")
    if tree.state_pool.available + len(all_states) != tree.state_pool.size:
        _fail(
            f"state pool leak: available {tree.state_pool.available} + owned {len(all_states)} "
            f"!= size {tree.state_pool.size}"
        )
    used_kv = kv_evictable + kv_protected + held_kv_tokens
    if tree.kv_pool.available + used_kv != tree.kv_pool.size:
        _fail(f"KV pool leak: available {tree.kv_pool.available} + used {used_kv} != size {tree.kv_pool.size}")
