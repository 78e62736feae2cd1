"""TokenSpeed's device pools under pressure (``tokenspeed-scheduler`` 0.1.0, the radix-era C++ scheduler).

Read from its source (lightseekorg/tokenspeed, tokenspeed-scheduler/csrc at the 0.1.0 wheel's era: the
``scheduler/operations/forward.cpp`` schedule steps, ``resource/kv_prefix_cache/eviction.h``,
``resource/hybrid_prefix_cache/mamba_eviction_manager.cpp``, ``fsm/forward_events.cpp``) and checked request
by request against the real scheduler on CPU (tests/tokenspeed/test_scheduler_oracle.py). What differs from
SGLang's cache (``reference_impl.radix.tree``'s own eviction):

* A request holds whole pages from its first forward on, covering the prompt's uncached part plus one token
  for the decode input, then one more token per decode step (``LocalKVAllocator``): ``PageHold``.
* Before every forward the scheduler makes room by evicting whole least-recently-used KV leaves (each with
  its state) until enough pages are free: ``ceil((chunk + 1) / page)`` for a request's first chunk,
  ``ceil(chunk / page)`` for a later one (even if the request's last page has room), one page for a decode
  step whose last page is full.
* A state slot is made free before each later chunk and before the first decode step, whether or not the
  previous checkpoint is kept; state eviction drops only the state of the least recently used node without a
  stateful child (not on a running request's path), never its KV.
* At finish the KV of every full page of prompt + output stays in the tree, stateless past the last
  checkpoint.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from reference_impl.radix.node import Node
from reference_impl.radix.pools import PoolExhausted
from reference_impl.radix.tree import MambaRadixTree

__all__ = ["PageHold", "StateLeaves", "evict_pages", "evict_states"]


@dataclass(slots=True)
class PageHold:
    """The pages a running request holds outside the tree: they cover token positions [base, cover)."""

    base: int
    cover: int = 0
    pages: int = 0
    decoding: bool = False

    def tail(self, page_size: int) -> int:
        """Token positions still free in the request's last page."""
        return self.pages * page_size - (self.cover - self.base)

    def acquire(self, tree: MambaRadixTree, tokens: int) -> None:
        """Reserve ``tokens`` more positions, taking whole pages from the pool when the last one is full."""
        ps = tree.page_size
        over = tokens - self.tail(ps)
        if over > 0:
            pages = -(-over // ps)
            if not tree.kv_pool.alloc(pages * ps):
                raise PoolExhausted(f"KV pool exhausted: need {pages} pages, {tree.kv_pool.available // ps} free")
            self.pages += pages
        self.cover += tokens

    def give(self, tokens: int, page_size: int) -> None:
        """The tree took (or freed as duplicates) the first ``tokens`` positions, whole pages."""
        self.pages -= tokens // page_size
        self.base += tokens


def _state_leaf(node: Node) -> bool:
    """TokenSpeed's ``isMambaLeaf``: a state and no child (one level down) with one."""
    return node.state is not None and not any(c.state is not None for c in node.children.values())


class StateLeaves:
    """``MambaEvictionManager``'s set of state leaves, kept as the scheduler keeps it: a node joins when it gets a
    state or loses its last stateful child, never when a split puts a stateless node between it and that child
    (such a state is never evicted until the set is refreshed; with few slots, a request then waits for ever)."""

    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {}

    def track(self, tree: MambaRadixTree, node: Node) -> None:
        if _state_leaf(node):
            self.nodes[node.id] = node
        parent = node.parent
        if parent is not None and parent is not tree.root and not _state_leaf(parent):
            self.nodes.pop(parent.id, None)

    def update(self, tree: MambaRadixTree, node: Node | None) -> None:
        if node is None or node is tree.root:
            return
        if _state_leaf(node):
            self.nodes[node.id] = node
        else:
            self.nodes.pop(node.id, None)


def evict_pages(tree: MambaRadixTree, leaves: StateLeaves, pages: int) -> None:
    """``EnsureCapacityByEvict``: evict whole LRU leaves (with their states) until ``pages`` pages are free."""
    need = pages * tree.page_size
    while tree.kv_pool.available < need:
        leaf = tree.lru_leaf()
        if leaf is None:
            return
        stateful = leaf.state is not None
        tokens, states = tree._evict_leaf(leaf)
        tree.tokens_evicted_total += tokens
        tree.states_evicted_total += states
        leaves.nodes.pop(leaf.id, None)
        if stateful:
            leaves.update(tree, leaf.parent)


def evict_states(tree: MambaRadixTree, leaves: StateLeaves, slots: int) -> None:
    """``EnsureMambaCapacityByEvict``: drop states (never KV) of LRU state leaves on no running request's path
    until ``slots`` are free."""
    pool = tree.state_pool
    if pool.available >= slots:
        return
    heap = [(n.kv_tick, n.id, n) for n in leaves.nodes.values() if n.kv_lock == 0 and n.state is not None]
    heapq.heapify(heap)
    while pool.available < slots and heap:
        _, _, node = heapq.heappop(heap)
        tree._tombstone(node)
        tree.states_evicted_total += 1
        leaves.nodes.pop(node.id, None)
        parent = node.parent
        if parent is not None and parent is not tree.root and _state_leaf(parent):
            leaves.nodes[parent.id] = parent
            if parent.kv_lock == 0:
                heapq.heappush(heap, (parent.kv_tick, parent.id, parent))
