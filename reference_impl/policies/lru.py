"""SGLang's MambaRadixCache eviction: least recently used in each order (O(log n) per victim)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from reference_impl.policies.base import EvictionPolicy, TreeView

if TYPE_CHECKING:
    from reference_impl.radix.node import Node

__all__ = ["LRUPolicy"]


class LRUPolicy(EvictionPolicy):
    name = "lru"

    def kv_victim(self, tree: TreeView) -> Node | None:
        return tree.lru_leaf()

    def state_victim(self, tree: TreeView) -> Node | None:
        return tree.lru_state()
