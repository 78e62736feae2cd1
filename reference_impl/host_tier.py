"""The host (L2) tier: KV and recurrent states written back to host memory and loaded back on a hit.

Modelled on SGLang's HiCache for hybrid models and tokenspeed PR #162 (https://github.com/sgl-project/sglang,
Marconi, arXiv 2411.19379):

* separate host capacities for KV tokens and state slots;
* write-back when a request finishes (or is retracted): the sequence it cached on the device, with
  its state, is copied to the host;
* on a request's match, if the host holds a longer reusable prefix than the device, it is loaded
  back: device KV for the tokens the device lacks and a device state slot for the prefix's state;
* the host evicts in LRU order, leaves first, exactly like the device tree;
* a prefix is reusable only where its KV *and* its state exist (on device or host): host KV
  without a host state at that depth is not a hit;
* ``kv_only``: TokenSpeed's KV host tier without its Mamba host tier (no ``--enable-mamba-l2``). KV is
  still written back, but the host keeps no usable state, so it never supplies a hybrid hit.

The host copy is kept as a second ``MambaRadixTree`` over host pools. That gives the host the same
prefix sharing, tombstones and LRU orders as the device, with the same invariants, without a
second tree implementation. Transfer volumes are counted in tokens and states; the simulator turns
them into time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reference_impl.policies.lru import LRUPolicy
from reference_impl.radix.pools import KVPool, StateContent, StatePool
from reference_impl.radix.tree import MambaRadixTree

__all__ = ["HostTier", "HostTierCounters"]


@dataclass(slots=True)
class HostTierCounters:
    write_backs: int = 0
    write_back_tokens: int = 0  # KV tokens copied device → host
    load_backs: int = 0
    load_back_tokens: int = 0  # KV tokens copied host → device
    load_back_states: int = 0
    write_back_failures: int = 0  # the host could not make room (everything locked)


class HostTier:
    def __init__(self, kv_tokens: int, state_slots: int, *, page_size: int = 1, chunk_size: int = 64,
                 kv_only: bool = False) -> None:
        self.tree = MambaRadixTree(
            KVPool(kv_tokens), StatePool(state_slots), LRUPolicy(), page_size=page_size, chunk_size=chunk_size
        )
        self.counters = HostTierCounters()
        self.kv_only = kv_only

    def match(self, tokens: Sequence[int]) -> tuple[int, StateContent | None]:
        """Longest prefix the host can supply with both KV and a state, and that state's content."""
        if self.kv_only:
            return 0, None  # host KV without a host state: the hit is cut back to the device's state
        m = self.tree.match_prefix(tokens)
        if m.prefix_len == 0 or m.last_node.state is None:
            return 0, None
        return m.prefix_len, self.tree.state_pool.read(m.last_node.state)

    def write_back(self, tokens: Sequence[int], state: StateContent) -> bool:
        """Copy ``tokens`` (KV) and the state at their end to the host; False if it cannot fit."""
        tree = self.tree
        if not tokens:
            return False
        if len(tokens) > tree.kv_pool.size:
            self.counters.write_back_failures += 1
            return False
        # Make room: the KV the host lacks and one state slot. Eviction may shorten the match, so
        # re-match until the allocation fits or nothing more can go.
        while True:
            m = tree.match_prefix(tokens)
            need = len(tokens) - m.kv_match_len
            if tree.kv_pool.available >= need and tree.state_pool.available >= 1:
                break
            short_kv = max(0, need - tree.kv_pool.available)
            short_st = 1 if tree.state_pool.available < 1 else 0
            freed = tree.evict(num_tokens=short_kv, num_states=short_st)
            if freed.tokens_evicted == 0 and freed.states_evicted == 0:
                self.counters.write_back_failures += 1
                return False
        slot = tree.state_pool.alloc()
        assert slot is not None
        tree.state_pool.write(slot, state)
        assert tree.kv_pool.alloc(need)
        result = tree.insert(tokens, slot, prev_prefix_len=m.kv_match_len)
        if result.state_exists:
            tree.state_pool.free(slot)
        self.counters.write_backs += 1
        self.counters.write_back_tokens += need
        return True

    def record_load_back(self, tokens: int) -> None:
        self.counters.load_backs += 1
        self.counters.load_back_tokens += tokens
        self.counters.load_back_states += 1
