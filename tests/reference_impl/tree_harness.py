"""Shared builders for reference-cache tests: every helper checks invariants after each operation."""

from __future__ import annotations

from collections.abc import Sequence

from reference_impl.policies.registry import make_policy
from reference_impl.radix.invariants import check_invariants
from reference_impl.radix.pools import KVPool, StatePool
from reference_impl.radix.results import InsertResult
from reference_impl.radix.tree import MambaRadixTree


class TreeHarness:
    """A tree plus helpers that allocate like SGLang's unit-test fixture and check invariants."""

    def __init__(
        self, kv: int = 128, states: int = 20, page_size: int = 1, policy: str = "lru", semantics: str = "0.5.23"
    ) -> None:
        self.tree = MambaRadixTree(
            KVPool(kv), StatePool(states), make_policy(policy), page_size=page_size, chunk_size=64, semantics=semantics
        )

    def insert(self, tokens: Sequence[int], prev_prefix_len: int = 0) -> InsertResult:
        tree = self.tree
        assert tree.kv_pool.alloc(len(tokens) - prev_prefix_len)
        slot = tree.state_pool.alloc()
        assert slot is not None
        result = tree.insert(tokens, slot, prev_prefix_len=prev_prefix_len)
        if tree.semantics == "0.5.9":
            tree.kv_pool.free(result.duplicate_kv)  # what 0.5.9's cache_finished_req does after insert
        if result.state_exists:
            tree.state_pool.free(slot)
        check_invariants(tree)
        return result

    def match(self, tokens: Sequence[int]) -> tuple[int, int]:
        m = self.tree.match_prefix(tokens)
        check_invariants(self.tree)
        return m.prefix_len, len(m.last_node.key)
