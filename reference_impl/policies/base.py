"""The eviction-policy interface of the SGLang-model tree.

A policy answers two questions, one per recency order of the tree: which unlocked leaf to evict
when KV tokens are needed, and which unlocked state to drop when state slots are needed. It picks
from the tree's candidate sets (``evictable_leaves``, ``evictable_states``); the tree does the
eviction, so a policy can never break the tree's invariants.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from reference_impl.radix.node import Node
    from reference_impl.radix.tree import MambaRadixTree

__all__ = ["EvictionPolicy"]


class EvictionPolicy(ABC):
    name: ClassVar[str]

    @abstractmethod
    def kv_victim(self, tree: MambaRadixTree) -> Node | None:
        """An unlocked leaf to evict (with its KV and state), or None if there is none."""

    @abstractmethod
    def state_victim(self, tree: MambaRadixTree) -> Node | None:
        """An unlocked stateful node whose state to drop, or None if there is none."""
