"""Lazy min-heaps of ``(tick, depth, node id)`` over a dict of live candidates: the tree's LRU orders.

An entry goes stale when its node stops being a candidate or is touched again (a new tick); stale
entries are skipped when peeked and dropped when the heap has grown to twice its live size.
"""

from __future__ import annotations

import heapq

from reference_impl.radix.node import Node

__all__ = ["compact", "peek_live"]

Heap = list[tuple[int, int, int]]


def peek_live(heap: Heap, live: dict[int, Node], tick_attr: str) -> Node | None:
    """The oldest heap entry that is still a candidate with its current tick; stale entries are dropped."""
    while heap:
        tick, _depth, nid = heap[0]
        node = live.get(nid)
        if node is not None and getattr(node, tick_attr) == tick:
            return node
        heapq.heappop(heap)
    return None


def compact(heap: Heap, live: dict[int, Node], tick_attr: str) -> Heap:
    """``heap``, or a fresh one of the live entries when stale ones outnumber them."""
    if len(heap) <= 2 * len(live) + 64:
        return heap
    fresh = [(getattr(n, tick_attr), n.depth, n.id) for n in live.values()]
    heapq.heapify(fresh)
    return fresh
