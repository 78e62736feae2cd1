"""The eviction-policy interface of the SGLang-model tree.

A policy answers two questions, one per recency order of the tree: which unlocked leaf to evict
when KV tokens are needed, and which unlocked state to drop when state slots are needed. It picks
from the tree's candidate sets (``evictable_leaves``, ``evictable_states``); the tree does the
eviction, so a policy can never break the tree's invariants.

A policy sees the tree only through ``TreeView`` (what it may read), so this package does not
depend on ``reference_impl.radix.tree``; the tree depends on the policy interface, one way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from reference_impl.radix.node import Node

__all__ = ["EvictionPolicy", "TreeView"]


class TreeView(Protocol):
    """What a policy may read of the tree: its clock, root, candidate sets, LRU orders and change logs."""

    @property
    def clock(self) -> int: ...

    @property
    def root(self) -> Node: ...

    @property
    def evictable_leaves(self) -> Mapping[int, Node]: ...

    @property
    def evictable_states(self) -> Mapping[int, Node]: ...

    @property
    def changed_leaves(self) -> dict[int, Node | None] | None: ...

    @property
    def changed_states(self) -> dict[int, Node | None] | None: ...

    policy_state: object  # the policy's own index of this tree, if it keeps one

    def lru_leaf(self) -> Node | None: ...

    def lru_state(self) -> Node | None: ...


class EvictionPolicy(ABC):
    name: ClassVar[str]
    # True: the tree logs the nodes to re-examine per order (``TreeView.changed_leaves``/``changed_states``).
    tracks_changes: ClassVar[bool] = False

    @abstractmethod
    def kv_victim(self, tree: TreeView) -> Node | None:
        """An unlocked leaf to evict (with its KV and state), or None if there is none."""

    @abstractmethod
    def state_victim(self, tree: TreeView) -> Node | None:
        """An unlocked stateful node whose state to drop, or None if there is none."""
