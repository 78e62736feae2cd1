"""TokenSpeed's tree walks (``tokenspeed-scheduler`` 0.1.0 ``RadixTree::WalkDownUtilMismatch``): match and insert.

They differ from SGLang's (``MambaRadixTree.match_prefix`` / ``insert``) only in what they mark as recently used,
which decides the LRU victims under pool pressure (``tokenspeed_pool``):

* a walk stamps every node it passes with one time — a match the whole KV match, past the deepest state too;
  an insert its path and the node it adds;
* a split's upper half inherits the node's time and is stamped by the walk; the lower half keeps its old time
  (SGLang re-stamps it as just used).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from reference_impl.radix.key import child_key, match_len, page_floor
from reference_impl.radix.node import Node
from reference_impl.radix.results import InsertResult, MatchResult
from reference_impl.radix.tree import MambaRadixTree

__all__ = ["ts_insert", "ts_match"]


def _stamp(tree: MambaRadixTree, node: Node, tick: int) -> None:
    node.kv_tick = tick
    if node.id in tree.evictable_leaves:
        heapq.heappush(tree._kv_heap, (tick, node.depth, node.id))


def _split(tree: MambaRadixTree, child: Node, split_len: int) -> Node:
    """Cut ``child``'s edge after ``split_len`` tokens; neither half is stamped here."""
    parent = child.parent
    assert parent is not None
    ps = tree.page_size
    new = tree._new_node(child.key[:split_len], parent, child.depth - len(child.key) + split_len)
    new.kv_lock = child.kv_lock  # KV locks cover whole paths, so the upper half inherits them
    new.kv_tick = child.kv_tick
    new.host_kv = child.host_kv
    parent.children[child_key(new.key, 0, ps)] = new
    child.key = child.key[split_len:]
    child.parent = new
    new.children[child_key(child.key, 0, ps)] = child
    return new


def _walk(tree: MambaRadixTree, key: tuple[int, ...], tick: int) -> tuple[Node, int, Node, int]:
    """Walk ``key`` (page-aligned) down the tree, splitting where it diverges mid-edge and stamping what it
    matched; returns (last node, matched length, deepest stateful node on the way, its depth)."""
    ps = tree.page_size
    node, pos = tree.root, 0
    best, best_len = tree.root, 0
    while pos < len(key):
        child = node.children.get(child_key(key, pos, ps))
        if child is None:
            break
        m = match_len(child.key, key, pos, ps)
        whole = m == len(child.key)
        if not whole:
            child = _split(tree, child, m)
        _stamp(tree, child, tick)
        pos += m
        node = child
        if node.state is not None:
            best, best_len = node, pos
        if not whole:
            break
    return node, pos, best, best_len


def ts_match(tree: MambaRadixTree, tokens: Sequence[int]) -> MatchResult:
    """``HybridPrefixCache::Match`` on the device: the KV match cut back to its deepest state."""
    key = tuple(tokens)
    _, pos, best, best_len = _walk(tree, key[: page_floor(len(key), tree.page_size)], tree.tick())
    aligned = pos // tree.chunk_size * tree.chunk_size
    return MatchResult(best_len, best, pos, aligned if pos > best_len and aligned > best_len else None)


def ts_insert(tree: MambaRadixTree, tokens: Sequence[int], state: int | None, prev_prefix_len: int) -> InsertResult:
    """Insert ``tokens``' KV (the caller owns it from ``prev_prefix_len`` on; duplicates go back to the pool) and,
    unless ``state`` is None, a state for their end (``state_exists``: the caller frees it)."""
    ps = tree.page_size
    key = tuple(tokens)
    if len(key) % ps:
        raise ValueError(f"insert key of {len(key)} tokens is not aligned to page size {ps}")
    if not key:
        return InsertResult(0, True, 0, tree.root)
    tick = tree.tick()
    node, pos, _, _ = _walk(tree, key, tick)
    duplicate = max(0, pos - prev_prefix_len)
    if duplicate:
        tree.kv_pool.free(duplicate)
    if pos < len(key):
        leaf = tree._new_node(key[pos:], node, len(key))
        node.children[child_key(leaf.key, 0, ps)] = leaf
        leaf.kv_tick = leaf.state_tick = tick
        tree.kv_evictable += len(leaf.key)
        if state is not None:
            leaf.state = state
            tree.state_evictable += 1
        tree._refresh_candidacy(leaf)
        tree._refresh_candidacy(node)
        return InsertResult(pos, False, duplicate, leaf)
    if state is None or node.state is not None:
        return InsertResult(pos, state is not None, duplicate, node)
    node.state, node.state_tick = state, tick
    if node.state_lock:
        tree.state_protected += 1
    else:
        tree.state_evictable += 1
    tree._refresh_candidacy(node)
    return InsertResult(pos, False, duplicate, node)
