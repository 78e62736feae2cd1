"""A radix-tree node: one edge of tokens, the KV of that edge, at most one recurrent-state checkpoint.

``state is None`` marks a *tombstone*: the node keeps its KV but its state was evicted (or never
existed, for a node created by a split). Recency is kept as integer ticks of the owning tree's
logical clock; KV order compares ``(kv_tick, depth)`` so that a path refreshed in one operation keeps
the child more recent than its parent, exactly like SGLang's ``reset_node_and_parents_mru``.
"""

from __future__ import annotations

from reference_impl.radix.key import ChildKey

__all__ = ["Node"]


class Node:
    __slots__ = (
        "children",
        "depth",
        "host_kv",
        "host_state",
        "id",
        "key",
        "kv_lock",
        "kv_tick",
        "logged_state",
        "parent",
        "state",
        "state_lock",
        "state_tick",
    )

    def __init__(self, node_id: int, key: tuple[int, ...], parent: Node | None, depth: int) -> None:
        self.id = node_id
        self.key = key  # edge tokens; the node owns the KV of exactly these tokens
        self.parent = parent
        self.children: dict[ChildKey, Node] = {}
        self.depth = depth  # tokens from the root to the end of this edge (the state's position)
        self.state: int | None = None  # state-pool slot; None = tombstone
        self.kv_lock = 0
        self.state_lock = 0
        self.kv_tick = 0
        self.state_tick = 0
        self.host_kv = False  # host tier holds a copy of this edge's KV
        self.host_state: int | None = None  # host-tier state slot
        self.logged_state = False  # whether the tree's change logs last saw a state here (RecencyOrders)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def kv_order(self) -> tuple[int, int]:
        return (self.kv_tick, self.depth)

    def __repr__(self) -> str:
        return (
            f"Node(id={self.id}, depth={self.depth}, edge={len(self.key)}, state={self.state}, "
            f"kv_lock={self.kv_lock}, state_lock={self.state_lock})"
        )
