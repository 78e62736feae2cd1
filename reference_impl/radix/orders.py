"""The tree's two recency orders: a logical clock, the candidate sets and their lazy LRU heaps.

A node is a KV candidate when it is an unlocked leaf and a state candidate when its state may be dropped
(see ``_refresh_candidacy``). Each order keeps a dict of its candidates and a min-heap of ``(tick, depth,
id)`` entries; policies draw victims from them (``reference_impl.policies``).

For a policy that ranks candidates by more than recency (``EvictionPolicy.tracks_changes``) the orders also
log, per order, every node to re-examine since the policy last read the log: a node that joined or left the
order or was re-stamped in it, and every node whose nearest stateful ancestor changed (a node with children
gained or lost its state). Such a policy keeps its own index up to date from the logs instead of rescanning every
candidate per victim. Without such a policy nothing is logged.
"""

from __future__ import annotations

import heapq

from reference_impl.radix.heaps import compact, peek_live
from reference_impl.radix.node import Node

__all__ = ["RecencyOrders"]


class RecencyOrders:
    root: Node

    def __init__(self, *, tracks_changes: bool = False) -> None:
        self.clock = 0
        self.evictable_leaves: dict[int, Node] = {}  # non-root, childless, unlocked
        self.evictable_states: dict[int, Node] = {}  # stateful, state-unlocked, not a KV-locked leaf
        self._kv_heap: list[tuple[int, int, int]] = []  # (kv_tick, depth, id), lazily invalidated
        self._state_heap: list[tuple[int, int, int]] = []  # (state_tick, depth, id)
        # The change logs: id -> node, or None once deleted (a dict: a node touched many times is logged once).
        self.changed_leaves: dict[int, Node | None] | None = {} if tracks_changes else None
        self.changed_states: dict[int, Node | None] | None = {} if tracks_changes else None
        self.policy_state: object = None  # whatever the policy derives from the logs, kept with the tree it indexes

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    # Every touch takes a fresh tick, so no two nodes share one except a split's upper half, which
    # inherits its lower half's tick: nodes sharing a tick form one ancestor chain, and ordering by
    # (tick, depth) reproduces SGLang's linked-list order exactly.
    def _touch_kv(self, node: Node) -> None:
        self.clock += 1  # tick(), inlined: every node of every matched path is touched
        tick = node.kv_tick = self.clock
        if node.id in self.evictable_leaves:
            heapq.heappush(self._kv_heap, (tick, node.depth, node.id))
            if len(self._kv_heap) > 2 * len(self.evictable_leaves) + 64:  # compact()'s test: only a push grows it
                self._compact_heaps()
            if self.changed_leaves is not None:
                self.changed_leaves[node.id] = node

    def _touch_state(self, node: Node) -> None:
        self.clock += 1
        tick = node.state_tick = self.clock
        if node.id in self.evictable_states:
            heapq.heappush(self._state_heap, (tick, node.depth, node.id))
            if len(self._state_heap) > 2 * len(self.evictable_states) + 64:
                self._compact_heaps()
            if self.changed_states is not None:
                self.changed_states[node.id] = node

    def _refresh_candidacy(self, node: Node) -> None:
        """Recompute whether ``node`` may be picked by either order after any change to it."""
        if node is self.root:
            return
        leaves, states = self.changed_leaves, self.changed_states
        leaf = node.kv_lock == 0 and not node.children
        if leaf and node.id not in self.evictable_leaves:
            self.evictable_leaves[node.id] = node
            heapq.heappush(self._kv_heap, (node.kv_tick, node.depth, node.id))
            if len(self._kv_heap) > 2 * len(self.evictable_leaves) + 64:
                self._compact_heaps()
            if leaves is not None:
                leaves[node.id] = node
        elif not leaf and self.evictable_leaves.pop(node.id, None) is not None and leaves is not None:
            leaves[node.id] = node
        # A childless node whose KV is locked by an in-flight request must not be deleted through
        # the state order (the hazard behind SGLang #21379), so it is not a state candidate.
        stateful = node.state is not None and node.state_lock == 0 and (bool(node.children) or node.kv_lock == 0)
        if stateful and node.id not in self.evictable_states:
            self.evictable_states[node.id] = node
            heapq.heappush(self._state_heap, (node.state_tick, node.depth, node.id))
            if len(self._state_heap) > 2 * len(self.evictable_states) + 64:
                self._compact_heaps()
            if states is not None:
                states[node.id] = node
        elif not stateful and self.evictable_states.pop(node.id, None) is not None and states is not None:
            states[node.id] = node
        # Every change of a node's state passes through here (the tree's and the lifecycles' alike).
        if leaves is not None and (node.state is not None) is not node.logged_state:
            node.logged_state = node.state is not None
            if node.children:
                self._log_regrounded(node)

    def _log_regrounded(self, node: Node) -> None:
        """Log the descendants whose nearest stateful ancestor was or now is ``node`` (its state changed)."""
        assert self.changed_leaves is not None and self.changed_states is not None
        stack = list(node.children.values())
        while stack:
            child = stack.pop()
            self.changed_leaves[child.id] = child
            self.changed_states[child.id] = child
            if child.state is None:  # a tombstone passes the change on to its own children
                stack.extend(child.children.values())

    def _forget(self, node: Node) -> None:
        """``node`` left the tree, and with it both orders."""
        was_leaf = self.evictable_leaves.pop(node.id, None) is not None
        was_state = self.evictable_states.pop(node.id, None) is not None
        # Logged by id alone: a log must not keep a deleted node's edge alive until the next victim.
        if self.changed_leaves is not None and (was_leaf or node.id in self.changed_leaves):
            self.changed_leaves[node.id] = None
        if self.changed_states is not None and (was_state or node.id in self.changed_states):
            self.changed_states[node.id] = None

    def _compact_heaps(self) -> None:
        self._kv_heap = compact(self._kv_heap, self.evictable_leaves, "kv_tick")
        self._state_heap = compact(self._state_heap, self.evictable_states, "state_tick")

    def lru_leaf(self) -> Node | None:
        """Least recently used unlocked leaf in KV order."""
        return peek_live(self._kv_heap, self.evictable_leaves, "kv_tick")

    def lru_state(self) -> Node | None:
        """Least recently used state-unlocked stateful node in state order."""
        return peek_live(self._state_heap, self.evictable_states, "state_tick")
