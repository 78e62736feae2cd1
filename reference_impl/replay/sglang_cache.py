"""Replay adapter for the SGLang-model tree: each trace row runs one request's full lifecycle.

Pools come from one byte budget split the way SGLang splits it when ``--max-mamba-cache-size`` is
unset: states get ``r / (1 + r)`` of the bytes (``r = --mamba-full-memory-ratio``, 0.9), KV the rest
(https://github.com/sgl-project/sglang, pool sizing). A request that cannot fit even in an empty cache is counted as
rejected and served uncached, as a real server would refuse it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from reference_impl.host_tier import HostTier
from reference_impl.lifecycle import (
    STATES_PER_REQUEST_WITH_CACHE,
    CachedRequest,
    Strategy,
    make_strategy,
)
from reference_impl.policies.base import EvictionPolicy
from reference_impl.radix.pools import KVPool, PoolExhausted, StatePool
from reference_impl.radix.tree import MambaRadixTree
from reference_impl.replay.api import ReplayConfig, ReplayStats

__all__ = ["PoolSizes", "SGLangReplayCache", "pool_sizes", "split_bytes"]


class PoolSizes:
    def __init__(self, kv_tokens: int, state_slots: int) -> None:
        self.kv_tokens = kv_tokens
        self.state_slots = state_slots


def split_bytes(capacity_bytes: int, config: ReplayConfig) -> PoolSizes:
    """KV tokens and state slots from one byte budget, split as SGLang splits it."""
    state_bytes = config.model.state_bytes()
    r = config.mamba_full_memory_ratio
    slots = int(capacity_bytes * r / (1 + r)) // state_bytes
    kv_tokens = (capacity_bytes - slots * state_bytes) // config.model.kv_bytes_per_token()
    return PoolSizes(kv_tokens, slots)


def pool_sizes(config: ReplayConfig) -> PoolSizes:
    sizes = split_bytes(config.capacity_bytes, config)
    slots, kv_tokens, state_bytes = sizes.state_slots, sizes.kv_tokens, config.model.state_bytes()
    needed = STATES_PER_REQUEST_WITH_CACHE + {"extra_buffer": 2, "extra_buffer_lazy": 1}.get(config.strategy, 0)
    if slots < needed:
        raise ValueError(
            f"capacity {config.capacity_bytes} B gives {slots} state slots of {state_bytes} B; "
            f"a running request needs {needed}"
        )
    return PoolSizes(kv_tokens, slots)


class SGLangReplayCache:
    def __init__(self, config: ReplayConfig, policy: EvictionPolicy) -> None:
        sizes = pool_sizes(config)
        self.tree = MambaRadixTree(
            KVPool(sizes.kv_tokens), StatePool(sizes.state_slots), policy, page_size=config.page_size
        )
        self.host: HostTier | None = None
        if config.host_capacity_bytes > 0:
            host = split_bytes(config.host_capacity_bytes, config)
            if host.state_slots < 1 or host.kv_tokens < config.page_size:
                raise ValueError(f"host capacity {config.host_capacity_bytes} B holds no state or no KV page")
            self.host = HostTier(host.kv_tokens, host.state_slots, page_size=config.page_size)
        self.strategy: Strategy = make_strategy(
            config.strategy,
            self.tree,
            chunked_prefill_size=config.chunked_prefill_size,
            track_interval=config.track_interval,
            host=self.host,
        )
        self._pending: CachedRequest | None = None
        self._pending_input: Sequence[int] = ()
        self.rejected = 0

    def lookup(self, input_tokens: Sequence[int]) -> int:
        if self._pending is not None:
            self.strategy.release(self._pending)
        try:
            self._pending = self.strategy.admit(input_tokens)
            self._pending_input = input_tokens
        except PoolExhausted:
            self._pending = None
            return 0
        return self._pending.prefix_len

    def admit(self, input_tokens: Sequence[int], output_tokens: Sequence[int]) -> None:
        req = self._pending
        self._pending = None
        # The same immutable (hashable: a tuple, a trace row's TokenIds) row that was looked up needs no
        # token-by-token comparison.
        same = input_tokens is self._pending_input and isinstance(input_tokens, Hashable)
        if req is None or not (same or req.tokens == list(input_tokens)):
            if req is not None:
                self.strategy.release(req)
            self.rejected += 1
            return
        try:
            self.strategy.prefill(req, finishes_after_prefill=len(output_tokens) <= 1)
            self.strategy.decode(req, output_tokens)
            self.strategy.finish(req)
        except PoolExhausted:
            self.strategy.release(req)
            self.rejected += 1

    def stats(self) -> ReplayStats:
        c = self.strategy.counters
        return ReplayStats(
            states_admitted=c.states_inserted - c.states_duplicate,
            states_evicted=self.tree.states_evicted_total,
            notes=(
                ("rejected_requests", float(self.rejected)),
                ("kv_pool_tokens", float(self.tree.kv_pool.size)),
                ("state_pool_slots", float(self.tree.state_pool.size)),
                ("state_checkpoint_skips", float(c.state_alloc_failures)),
                *self._host_notes(),
            ),
        )

    def _host_notes(self) -> tuple[tuple[str, float], ...]:
        if self.host is None:
            return ()
        h = self.host.counters
        return (
            ("host_load_backs", float(h.load_backs)),
            ("host_load_back_tokens", float(h.load_back_tokens)),
            ("host_write_back_tokens", float(h.write_back_tokens)),
        )
