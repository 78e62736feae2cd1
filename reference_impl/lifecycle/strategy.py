"""The request flow every strategy shares: admission, prefill chunks, decode, insertion, release.

Subclasses (``strategies``) decide where states are tracked and which are inserted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from reference_impl.host_tier import HostTier
from reference_impl.lifecycle.request import (
    STATES_PER_REQUEST_WITH_CACHE,
    CachedRequest,
    LifecycleCounters,
)
from reference_impl.radix.key import page_floor
from reference_impl.radix.node import Node
from reference_impl.radix.pools import PoolExhausted
from reference_impl.radix.tree import MambaRadixTree

__all__ = ["Strategy"]


class Strategy(ABC):
    """Common request flow; subclasses decide where states are tracked and inserted."""

    name = "base"

    def __init__(
        self,
        tree: MambaRadixTree,
        *,
        chunked_prefill_size: int | None = 8192,
        track_interval: int = 256,
        overlap: bool = True,
        host: HostTier | None = None,
    ) -> None:
        self.tree = tree
        self.host = host
        self.chunked_prefill_size = chunked_prefill_size
        self.track_interval = track_interval
        self.overlap = overlap
        self.counters = LifecycleCounters()

    # ---------------------------------------------------------------- slots
    def _alloc_state(self, protect: Node | None = None) -> int:
        slot = self.tree.state_pool.alloc()
        if slot is None:
            handle = self.tree.lock(protect) if protect is not None else None
            self.tree.evict(num_states=1)
            if handle is not None:
                self.tree.unlock(handle)
            slot = self.tree.state_pool.alloc()
        if slot is None:
            raise PoolExhausted("Can not alloc mamba cache")
        return slot

    def _evict_for_kv(self, n: int, protect: Node | None = None) -> None:
        """Make room for a KV allocation of ``n`` tokens. 0.5.9 and 0.5.16 evict all ``n`` once the pool is short
        (evict_from_tree_cache's standard-allocator branch: 0.5.9 mem_cache/common.py:249-252, 0.5.16 :125-128);
        0.5.23 only the shortfall (evict_to_free_tokens, mem_cache/allocator/base.py:166-168)."""
        pool = self.tree.kv_pool
        if n > pool.available:
            handle = self.tree.lock(protect) if protect is not None else None
            self.tree.evict(num_tokens=n if self.tree.semantics in ("0.5.9", "0.5.16") else n - pool.available)
            if handle is not None:
                self.tree.unlock(handle)

    def evict_for_extend_kv(self, extend_lens: Sequence[int]) -> None:
        """``alloc_for_extend`` allocates an extend batch's KV once, for all its requests (0.5.9
        mem_cache/common.py:358-374, 0.5.16 mem_cache/allocation.py:350-369, 0.5.23 :431-449): its eviction is
        sized by the batch's total, over-estimated by a page per request when paged (alloc_paged_token_slots_extend:
        0.5.9 common.py:267, 0.5.16 allocation.py:203, 0.5.23 :192-200). Every request of the batch is locked."""
        ps = self.tree.page_size
        self._evict_for_kv(sum(extend_lens) + (len(extend_lens) * ps if ps > 1 else 0))

    def decode_kv_demand(self, num_reqs: int) -> int:
        """What a decode step of ``num_reqs`` evicts for: its KV is one allocation too, sized a token (paged, a page)
        per request (alloc_for_decode: 0.5.9 mem_cache/common.py:435-450 with :404, 0.5.16
        mem_cache/allocation.py:552-570 with :500, 0.5.23 :638-655 with :584)."""
        return num_reqs * self.tree.page_size

    def evict_for_decode_kv(self, num_reqs: int) -> None:
        self._evict_for_kv(self.decode_kv_demand(num_reqs))

    def _alloc_kv(self, n: int, protect: Node | None = None) -> None:
        pool = self.tree.kv_pool
        self._evict_for_kv(n, protect)
        if not pool.alloc(n):
            raise PoolExhausted(f"KV pool exhausted: need {n} tokens, {pool.available} available")

    def _num_track_slots(self) -> int:
        return 0

    # ---------------------------------------------------------------- admission
    def admit(self, input_tokens: Sequence[int], max_prefix: int | None = None) -> CachedRequest:
        """An extend batch of one request: ``match_request``, then ``alloc_slots`` for it alone."""
        req = self.match_request(input_tokens, max_prefix)
        try:
            self.alloc_slots([req])
        except PoolExhausted:
            self.release(req)
            raise
        return req

    def match_request(self, input_tokens: Sequence[int], max_prefix: int | None = None) -> CachedRequest:
        """What the scheduler does per request while it forms an extend batch: match, lock the matched node, and
        give a hit its live state (copy-on-write from the node); ``max_prefix`` caps the hit. A miss's live state
        and the track slots come with the batch's ``alloc_slots``."""
        tree = self.tree
        req = CachedRequest.of(input_tokens)
        limit = page_floor(max(0, req.input_len - 1), tree.page_size)  # always recompute >= 1 token
        if max_prefix is not None:
            limit = min(limit, page_floor(max(0, max_prefix), tree.page_size))
        req.match_limit = limit
        match = tree.match_prefix(req.prefix(limit))
        req.prefix_len = req.protected_len = req.kv_len = match.prefix_len
        req.branch_seqlen = match.branch_seqlen
        # The PrefillAdder locks the matched node, so the batch's eviction cannot take the hit.
        req.lock = tree.lock(match.last_node)
        if match.last_node.state is not None:
            # The COW slot is taken at match time (0.5.9 mem_cache/mamba_radix_cache.py:998-1011), before the
            # batch's alloc_req_slots.
            try:
                self._seed_live_state(req, self._alloc_state(protect=match.last_node), match.last_node)
                if self.host is not None:
                    self._load_back(req, limit)
            except PoolExhausted:
                self.release(req)
                raise
        return req

    def pending_slots(self, req: CachedRequest) -> int:
        """State slots ``alloc_slots`` will still give ``req``: a miss's live state, the track slots."""
        return int(req.live_state is None) + self._num_track_slots() - len(req.track_slots)

    def alloc_slots(self, reqs: Sequence[CachedRequest], continuing: int = 0) -> None:
        """``alloc_req_slots`` once for an extend batch: ``reqs`` matched by ``match_request``, and ``continuing``
        chunked requests that hold their slots already. 0.5.9 and 0.5.16 evict until 3 states per request of the
        batch are free, the chunked one included (0.5.9 mem_cache/common.py:302-316, 0.5.16
        mem_cache/allocation.py:267-283; #38151 calls it over-eviction); 0.5.23 until the slots the batch still
        takes are free (ensure_mamba_capacity, mem_cache/allocation.py:298-324). Then each request gets them
        (HybridReqToTokenPool.alloc). On PoolExhausted the requests before the failing one hold all theirs."""
        pool = self.tree.state_pool
        if self.tree.semantics in ("0.5.9", "0.5.16"):
            need = STATES_PER_REQUEST_WITH_CACHE * (len(reqs) + continuing)
        else:
            need = sum(self.pending_slots(r) for r in reqs)
        if pool.available < need:
            self.tree.evict(num_states=need - pool.available)
        for req in reqs:
            if req.live_state is None:  # a miss
                assert req.lock is not None
                node = req.lock.node
                self._seed_live_state(req, self._alloc_state(protect=node), node)
                if self.host is not None:
                    self._load_back(req, req.match_limit)
            while len(req.track_slots) < self._num_track_slots():
                req.track_slots.append(self._alloc_state())

    def _seed_live_state(self, req: CachedRequest, slot: int, matched: Node) -> None:
        """``slot`` becomes the request's live state: a copy of the matched node's (copy-on-write; SGLang 0.5.23
        managers/schedule_batch.py:3240 runs it on the forward stream), or a fresh one after a miss."""
        req.live_state = slot
        if matched.state is not None:
            self.tree.state_pool.copy(matched.state, slot)
            self.counters.state_copies += 1
        else:
            self.tree.state_pool.write(slot, req.fingerprint(0))

    def _load_back(self, req: CachedRequest, limit: int) -> None:
        """If the host holds a longer reusable prefix (up to ``limit``) than the device, bring it over."""
        assert self.host is not None and req.lock is not None and req.live_state is not None
        tree = self.tree
        host_len, content = self.host.match(req.tokens[:limit])
        if host_len <= req.prefix_len or content is None:
            return
        protect = req.lock.node
        try:
            slot = self._alloc_state(protect=protect)
        except PoolExhausted:
            return
        try:
            self._alloc_kv(host_len - req.protected_len, protect=protect)
        except PoolExhausted:
            tree.state_pool.free(slot)
            return
        tree.state_pool.write(slot, content)
        req.kv_len = host_len
        self._insert(req, host_len, slot)  # the device now holds KV and state for the host's prefix
        tree.state_pool.write(req.live_state, content)  # COW from the loaded state
        self.counters.state_copies += 1
        self.host.record_load_back(host_len - req.prefix_len)
        req.prefix_len = host_len

    def write_back(self, req: CachedRequest) -> None:
        """Copy what the request has cached on the device to the host tier (on finish or retract)."""
        if self.host is not None and req.protected_len > 0:
            self.host.write_back(req.tokens[: req.protected_len], req.fingerprint(req.protected_len))

    def release(self, req: CachedRequest) -> None:
        """Drop everything the request holds without caching it (abort or failed admission)."""
        tree = self.tree
        for slot in req.held_states():
            tree.state_pool.free(slot)
        req.live_state, req.track_slots = None, []
        tree.kv_pool.free(req.held_kv)
        req.kv_len = req.protected_len
        req.kv_reserved = 0
        if req.lock is not None:
            tree.unlock(req.lock)
            req.lock = None

    # ---------------------------------------------------------------- prefill and decode
    def prefill(self, req: CachedRequest, *, finishes_after_prefill: bool) -> None:
        """Run the prompt's uncached part in chunks of ``chunked_prefill_size``, checkpointing per strategy."""
        step = self.chunked_prefill_size or req.input_len
        while req.kv_len < req.input_len:
            end = min(req.kv_len + step, req.input_len)
            self.prefill_chunk(req, end, finishes_after_prefill=finishes_after_prefill)

    def alloc_chunk(self, req: CachedRequest, end: int) -> None:
        """Allocate KV for ``tokens[kv_len:end]`` (a scheduler does this when it plans the batch)."""
        self._alloc_kv(end - req.kv_len, protect=req.lock.node if req.lock else None)
        req.kv_len = end

    def decode_kv_need(self, running: Sequence[CachedRequest]) -> int:
        """KV tokens a decode step of ``running`` takes from the pool: one each."""
        return len(running)

    def reserve_decode_kv(self, req: CachedRequest, n: int = 1) -> None:
        """Allocate KV for the next ``n`` decode steps now, so the step itself cannot run out."""
        self._alloc_kv(n, protect=req.lock.node if req.lock else None)
        req.kv_reserved += n

    @property
    def aborts_pending(self) -> bool:
        """Whether some request is to be dropped after its decode reservation (``abort_reason``): the engine asks
        each running request only then, not at every decode step."""
        return False

    def abort_reason(self, req: CachedRequest) -> str | None:
        """Why the engine must drop ``req`` after its decode reservation (TokenSpeed only); None: it decodes."""
        return None

    def prefill_chunk(self, req: CachedRequest, end: int, *, finishes_after_prefill: bool) -> None:
        """One prefill forward over ``tokens[kv_len:end]``: allocate, track, checkpoint."""
        start = req.kv_len
        if req.kv_len > req.prefix_len:
            # A later chunk is an extend batch of its own: alloc_for_extend runs alloc_req_slots for it again.
            self.alloc_slots([], continuing=1)
        self.alloc_chunk(req, end)
        self.complete_chunk(req, start, finishes_after_prefill=finishes_after_prefill)

    def complete_chunk(self, req: CachedRequest, start: int, *, finishes_after_prefill: bool) -> None:
        """The forward over ``tokens[start:kv_len]`` ran: track states and checkpoint the chunk."""
        end = req.kv_len
        self._on_forward(req, start, end)
        assert req.live_state is not None
        self.tree.state_pool.write(req.live_state, req.fingerprint(end))
        if not (end == req.input_len and finishes_after_prefill):
            self.cache_unfinished(req)

    def begin_decode_step(self, reqs: Sequence[CachedRequest]) -> None:  # noqa: B027 - a hook, empty by default
        """A decode step of ``reqs`` is about to run its forward (only extra_buffer_lazy takes slots here)."""

    def end_decode_step(self) -> None:  # noqa: B027 - a hook, empty by default
        """The decode step begun last has applied its results."""

    def decode(self, req: CachedRequest, output_tokens: Sequence[int]) -> None:
        """Append the output; KV exists for every token but the last one sampled."""
        old_committed = req.kv_len
        req.tokens.extend(output_tokens)
        committed = len(req.tokens) - 1
        if committed > old_committed:
            take = min(req.kv_reserved, committed - old_committed)
            req.kv_reserved -= take
            if committed - old_committed > take:  # a single step's token came reserved: allocating 0 is a no-op
                self._alloc_kv(committed - old_committed - take)
            req.kv_len = committed
            self._on_decode(req, old_committed, committed)
            assert req.live_state is not None
            # Deferred: the live state is rewritten every step and its content read rarely (a copy, a write-back).
            self.tree.state_pool.write_prefix(req.live_state, req, committed)

    def _on_forward(self, req: CachedRequest, start: int, end: int) -> None:
        """A prefill forward over ``tokens[start:end]`` ran; track states if the strategy does."""
        return  # no_buffer and disabled track nothing mid-forward

    def track_position(self, req: CachedRequest, start: int, end: int) -> int | None:
        """Where a forward over ``tokens[start:end]`` tracks a state (a model executor snapshots it)."""
        return None

    def _on_decode(self, req: CachedRequest, start: int, end: int) -> None:
        """Decode committed ``tokens[start:end]``; track states if the strategy does."""
        return  # only extra_buffer tracks during decode

    # ---------------------------------------------------------------- insertion
    def _insert(self, req: CachedRequest, cache_len: int, slot: int) -> None:
        """Insert ``tokens[:cache_len]`` with ``slot``; re-lock the request on the new node."""
        tree = self.tree
        held = req.lock.node if req.lock is not None and req.lock.node.depth == req.protected_len else None
        result = tree.insert(req.prefix(cache_len), slot, prev_prefix_len=req.protected_len, held=held)
        if tree.semantics == "0.5.9":
            tree.kv_pool.free(result.duplicate_kv)  # 0.5.9's cache_*_req frees what insert left
        self.counters.states_inserted += 1
        if result.state_exists:
            self.counters.states_duplicate += 1
            tree.state_pool.free(slot)
        else:
            # A deferred label (no_buffer's finish donates the live state) is computed now: kept in the tree, it
            # would keep the finished request's tokens alive (the radix plan's peak memory doubled).
            tree.state_pool.read(slot)
        # The tree now owns KV up to cache_len (duplicates went back to the pool).
        match = tree.rematch(result.node)  # SGLang re-matches the key it inserted: the same refresh, no token walk
        if match.prefix_len != cache_len:
            raise RuntimeError(f"re-match after insert found {match.prefix_len} of {cache_len} tokens")
        assert req.lock is not None
        tree.unlock(req.lock)
        req.lock = tree.lock(match.last_node)
        req.protected_len = max(req.protected_len, cache_len)

    @abstractmethod
    def cache_unfinished(self, req: CachedRequest) -> None:
        """A prefill chunk (or the whole prompt of a request that goes on decoding) ran: checkpoint it."""

    @abstractmethod
    def finish(self, req: CachedRequest) -> None:
        """The request finished: cache what the strategy keeps, free the rest."""
