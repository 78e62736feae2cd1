"""SGLang's strategies (``no_buffer``, ``extra_buffer``, ``extra_buffer_lazy``, ``disabled``); TokenSpeed's is
``lifecycle.tokenspeed``."""

from __future__ import annotations

import math
from collections.abc import Sequence

from reference_impl.lifecycle.request import CachedRequest
from reference_impl.lifecycle.strategy import Strategy
from reference_impl.radix.pools import PoolExhausted

__all__ = ["DisabledStrategy", "ExtraBufferLazyStrategy", "ExtraBufferStrategy", "NoBufferStrategy"]


class NoBufferStrategy(Strategy):
    name = "no_buffer"

    def cache_unfinished(self, req: CachedRequest) -> None:
        assert req.live_state is not None and req.lock is not None
        try:
            slot = self._alloc_state(protect=req.lock.node)
        except PoolExhausted:
            # SGLang asserts here (#36770); the proposed fix, modelled here, skips the checkpoint.
            self.counters.state_alloc_failures += 1
            return
        self.tree.state_pool.copy(req.live_state, slot)
        # SGLang 0.5.23 mem_cache/unified_cache/components/mamba.py:677: no_buffer forks the live state
        # (MambaPool.copy_from, conv + temporal) into a new slot at every checkpoint of an unfinished request.
        self.counters.state_copies += 1
        self._insert(req, req.kv_len, slot)

    def finish(self, req: CachedRequest) -> None:
        assert req.live_state is not None
        slot, req.live_state = req.live_state, None
        if req.kv_len > req.protected_len:
            self._insert(req, req.kv_len, slot)
        else:
            self.tree.state_pool.free(slot)
        self.write_back(req)
        self.release(req)


class ExtraBufferStrategy(Strategy):
    name = "extra_buffer"

    def _num_track_slots(self) -> int:
        # 0.5.16 and 0.5.23 size the ping-pong pair by the overlap schedule; 0.5.9 always allocates two (one
        # with speculative decoding): HybridReqToTokenPool.__init__, mem_cache/memory_pool.py:453-455 in 0.5.9.
        return 2 if self.overlap or self.tree.semantics == "0.5.9" else 1

    def _on_forward(self, req: CachedRequest, start: int, end: int) -> None:
        if (track := self.track_position(req, start, end)) is not None:
            self._track(req, track)

    def track_position(self, req: CachedRequest, start: int, end: int) -> int | None:
        chunk = self.tree.chunk_size
        extend = end - start
        if extend < chunk:
            return None  # SGLang tracks nothing in a forward shorter than one chunk
        track = start + extend // chunk * chunk
        b = req.branch_seqlen
        if b is not None and start < b < end and (b - start) % chunk == 0:
            track = b  # checkpoint the branch point so the next request sharing it hits
        return track

    def decode_track_interval(self) -> int:
        """The committed-token interval decode tracks states at. 0.5.23 tracks where a checkpoint can be named: at
        multiples of lcm(the tree's chunk, ``track_interval``) (``runtime_context.mamba_track_grid``, used at
        ``schedule_batch.py:3803`` and ``batch_result_processor.py:1601``); earlier releases at multiples of the
        interval itself. The two differ only for an interval that is no multiple of the chunk."""
        interval = max(1, self.track_interval)
        return math.lcm(self.tree.chunk_size, interval) if self.tree.semantics == "0.5.23" else interval

    def books_ahead(self) -> bool:
        """0.5.16 with the overlap schedule books a decode track one step early: its result processor tests
        ``req.kv_committed_len % interval`` (batch_result_processor.py:973), which the look-ahead batch, prepared
        before this result is processed (scheduler.py:1576-1611), has already advanced (schedule_batch.py:2819).
        So the result of the step that commits ``s - 1`` books ``s``, the one the look-ahead forward tracks, and a
        track at the first decode step (prompt + 1) is never booked (the prefill's result books none). 0.5.23
        books on the step that wrote it (batch_result_processor.py:1386-1406); 0.5.9 counts tokens."""
        return self.overlap and self.tree.semantics == "0.5.16"

    def decode_track(self, start: int, end: int) -> int | None:
        """Where a decode of the committed range ``[start, end)`` tracks a state (None: nowhere)."""
        interval = self.decode_track_interval()
        lead = 1 if self.books_ahead() else 0
        last = (end + lead) // interval * interval
        return last if last > start + lead else None

    def _on_decode(self, req: CachedRequest, start: int, end: int) -> None:
        last = self.decode_track(start, end)
        if last is not None:
            if last > end and not req.kv_reserved:
                # The look-ahead batch's KV for the token at `end` (alloc_for_decode at its prepare): the finish
                # may cache it with the state; a later step feeds it from this reservation.
                self.reserve_decode_kv(req)
            self._track(req, last, decode=True)

    def _track(self, req: CachedRequest, position: int, *, decode: bool = False) -> None:
        # The ping-pong slot written next becomes the newest tracked state.
        slot = req.track_slots.pop(0)
        self.tree.state_pool.write(slot, req.fingerprint(position))
        # The forward copies the state at the tracked position into the ping-pong slot: SGLang 0.5.23
        # layers/attention/hybrid_linear_attn_backend.py:1043-1063 (SSM), linear/gdn_backend.py:1062 (conv),
        # hybrid_linear_attn_backend.py:975 (decode). Its donation to the tree later is not a copy.
        self.counters.state_copies += 1
        req.track_slots.append(slot)
        req.track_seqlen = position

    def cache_unfinished(self, req: CachedRequest) -> None:
        if req.track_seqlen is None or req.track_seqlen <= req.protected_len:
            req.track_seqlen = None
            return
        try:
            fresh = self._alloc_state(protect=req.lock.node if req.lock else None)
        except PoolExhausted:
            self.counters.state_alloc_failures += 1
            req.track_seqlen = None
            return
        if self.tree.semantics == "0.5.9":
            # 0.5.9 forks: the tree gets a copy of the newest tracked state and the ping-pong pair keeps its slots
            # (MambaRadixCache.cache_unfinished_req, mem_cache/mamba_radix_cache.py:597-620 in 0.5.9).
            donated = fresh
            self.tree.state_pool.copy(req.track_slots[-1], donated)
            self.counters.state_copies += 1
        else:  # the newest tracked state goes to the tree, a fresh slot takes its place in the pair
            donated = req.track_slots.pop()
            req.track_slots.insert(0, fresh)
        self._insert(req, req.track_seqlen, donated)
        req.track_seqlen = None

    def finish(self, req: CachedRequest) -> None:
        cache_len = req.track_seqlen or 0
        if cache_len > req.protected_len:
            donated = req.track_slots.pop()
            self._insert(req, cache_len, donated)
        self.write_back(req)
        # KV past the last tracked state cannot be reused without a state: free it.
        self.release(req)


class ExtraBufferLazyStrategy(ExtraBufferStrategy):
    """``--mamba-radix-cache-strategy extra_buffer_lazy`` (SGLang PR #27118; 0.5.16 and 0.5.23): a request holds one
    ping-pong slot, not two, so the pool admits a running request per 3 + 1 slots instead of 3 + 2. A decode forward
    at a track boundary takes a second slot for the forward to write the new state into and frees the old one after
    it (``mamba_lazy_prealloc_at_boundary`` / ``mamba_lazy_post_decode_at_boundary``, schedule_batch.py:3618 and
    batch_result_processor.py:1686 in 0.5.23). 0.5.23 never evicts for that slot; 0.5.16 evicts one state first
    (schedule_batch.py:2732-2760 in 0.5.16). Without one the forward writes over the only slot: the new state is
    tracked in place. Lazy mode needs the overlap schedule (an assert in kv_cache_configurator's ratio)."""

    name = "extra_buffer_lazy"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        # Within one decode step (begin_decode_step .. end_decode_step): the second slots SGLang takes for the whole
        # batch before its forward (by request), and the old slots it frees after it.
        self._second: dict[int, int | None] | None = None
        self._old: list[int] = []
        if not self.overlap:
            raise ValueError("extra_buffer_lazy requires the overlap schedule, as SGLang asserts")
        if self.tree.semantics == "0.5.9":
            raise ValueError("SGLang 0.5.9 has no extra_buffer_lazy (it came with 0.5.16's PR #27118)")

    def _num_track_slots(self) -> int:
        return 1

    def begin_decode_step(self, reqs: Sequence[CachedRequest]) -> None:
        """Before a decode step's forward: a second slot for every request whose decode tracks at this step, all
        taken before any old one is freed (``mamba_lazy_prealloc_at_boundary`` walks the batch), so requests that
        cross a boundary together need as many slots (0.5.16: as many evictions) as there are of them."""
        self._second = {}
        for req in reqs:
            start = req.kv_len
            if start >= req.input_len and len(req.tokens) > start and self.decode_track(start, start + 1) is not None:
                self._second[id(req)] = self._alloc_transient(req)

    def end_decode_step(self) -> None:
        """After the step's results: the old slots go back, and any second slot its request did not use."""
        unused = [s for s in (self._second or {}).values() if s is not None]
        for slot in [*self._old, *unused]:
            self.tree.state_pool.free(slot)
        self._second, self._old = None, []

    def _track(self, req: CachedRequest, position: int, *, decode: bool = False) -> None:
        if not decode:
            super()._track(req, position)  # a prefill writes its tracked state into the one slot
            return
        stepping = self._second is not None
        fresh = self._second.pop(id(req), None) if self._second is not None else self._alloc_transient(req)
        if fresh is None:
            self.counters.in_place_tracks += 1
            req.overwritten_at = req.kv_len
            super()._track(req, position)
            return
        old = req.track_slots.pop()
        req.track_slots.append(fresh)
        super()._track(req, position)
        if stepping:
            self._old.append(old)  # freed once the step's results are in
        else:  # a driver that steps one request at a time (replay): freed at once
            self.tree.state_pool.free(old)

    def finish(self, req: CachedRequest) -> None:
        if self._kept_state_overwritten(req):
            req.track_seqlen = None  # the state the finish would donate was written over: nothing is inserted
        super().finish(req)

    def _kept_state_overwritten(self, req: CachedRequest) -> bool:
        """Whether a forward wrote over the finished request's kept state for want of a second slot. 0.5.16: its
        last step's own boundary did (``mamba_lazy_post_decode_at_boundary`` sets ``mamba_lazy_is_insert = False``,
        batch_result_processor.py:1002-1004). 0.5.23: the overlap's look-ahead batch, prepared before the last
        result, is at a boundary and finds no free slot (``mamba_lazy_checkpoint = False``,
        batch_result_processor.py:1408-1415); its slot, had it one, goes back at the release."""
        if self.tree.semantics == "0.5.16":
            return req.overwritten_at == req.kv_len
        if len(req.tokens) - req.input_len < 2 or (req.kv_len + 1) % self.decode_track_interval():
            # (a request its prefill finished had no decode batch to look ahead of)
            return False
        slot = self._alloc_transient(req)
        if slot is None:
            return True
        self.tree.state_pool.free(slot)
        return False

    def _alloc_transient(self, req: CachedRequest) -> int | None:
        """The boundary's second slot, or None: 0.5.16 evicts a state for it, 0.5.23 only takes a free one."""
        if self.tree.semantics == "0.5.16":
            try:
                return self._alloc_state(protect=req.lock.node if req.lock else None)
            except PoolExhausted:
                return None
        return self.tree.state_pool.alloc()


class DisabledStrategy(Strategy):
    """``--disable-radix-cache``: no matching, no insertion; a request holds one state slot."""

    name = "disabled"

    def match_request(self, input_tokens: Sequence[int], max_prefix: int | None = None) -> CachedRequest:
        req = CachedRequest.of(input_tokens)
        req.lock = self.tree.lock(self.tree.root)
        slot = self.tree.state_pool.alloc()
        if slot is None:
            self.release(req)
            raise PoolExhausted("Not enough space for mamba cache")
        req.live_state = slot
        self.tree.state_pool.write(slot, req.fingerprint(0))
        return req

    def alloc_slots(self, reqs: Sequence[CachedRequest], continuing: int = 0) -> None:
        return  # the slot came with the match; without a tree alloc_req_slots evicts nothing

    def cache_unfinished(self, req: CachedRequest) -> None:
        return

    def finish(self, req: CachedRequest) -> None:
        self.release(req)
