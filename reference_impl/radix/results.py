"""What the tree's operations return: a match, an insert, an eviction, a lock."""

from __future__ import annotations

from dataclasses import dataclass

from reference_impl.radix.node import Node

__all__ = ["EvictResult", "InsertResult", "LockHandle", "MatchResult"]


@dataclass(frozen=True, slots=True)
class MatchResult:
    prefix_len: int  # reusable tokens: the prefix ends on ``last_node``, which holds a state
    last_node: Node  # root when nothing is reusable
    kv_match_len: int  # tokens whose KV the tree holds along the path (may exceed prefix_len)
    branch_seqlen: int | None  # chunk-aligned KV match beyond the last state (SGLang's branching seqlen)


@dataclass(frozen=True, slots=True)
class InsertResult:
    prefix_len: int  # tokens of the key already in the tree before the insert
    state_exists: bool  # the key ended on a node that already had a state: the caller frees its slot
    duplicate_kv: int  # caller-held KV tokens the tree already had: freed here (0.5.23) or by the caller (0.5.9)
    node: Node  # where the key ends now (root for an empty key); it holds a state


@dataclass(frozen=True, slots=True)
class EvictResult:
    tokens_evicted: int
    states_evicted: int


@dataclass(frozen=True, slots=True)
class LockHandle:
    node: Node
    state_locked: bool  # False if the node was a tombstone when locked: release skips the state lock
