"""The engine core: SGLang's scheduler loop over the reference cache, without a model.

One call to ``schedule()`` plans the next forward (a prefill batch or a decode step) and reserves
its memory; the executor runs it (the simulator charges time from a cost model, the CPU server runs
a tiny model); ``complete()`` applies the sampled tokens. Modelled on SGLang's scheduler
(https://github.com/sgl-project/sglang):

* continuous batching; a new prefill batch has priority over decoding; prefill batches are bounded
  by ``max_prefill_tokens`` and long prompts are split at ``chunked_prefill_size`` (one chunked
  request at a time); schedule policy ``fcfs`` or ``lpm`` (longest prefix match first);
* ``max_running_requests`` is capped by ``state_slots // ratio`` where the ratio is the number of
  state slots SGLang reserves per running request (1 cache off, 3 on, +2/+1 for extra_buffer with
  or without overlap scheduling);
* admission checks *both* pools (free + evictable, minus what running requests will still need
  at the current ``new_token_ratio``) before allocating anything;
* when a decode step cannot get KV, requests are retracted (fewest outputs first, longest inputs
  first among ties), ``new_token_ratio`` backs off, and the retracted requests re-queue at the
  front; they keep the tokens they generated;
* pool exhaustion never crashes the core: it queues, evicts, retracts or aborts an impossible
  request, and counts each event in ``EngineCounters``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence

from reference_impl.engine.batch import Batch, BatchItem, EngineCounters, EngineRequest
from reference_impl.engine.config import EngineConfig, fits_kv_pool, state_ratio
from reference_impl.host_tier import HostTier
from reference_impl.lifecycle import CachedRequest, Strategy, make_strategy
from reference_impl.policies.registry import make_policy
from reference_impl.radix.key import page_floor
from reference_impl.radix.pools import KVPool, PoolExhausted, StatePool
from reference_impl.radix.tree import MambaRadixTree, cache_chunk_size

__all__ = ["Batch", "BatchItem", "EngineCore", "EngineCounters", "EngineRequest"]

RETRACT_DECODE_STEPS = 20  # SGLang: tokens of headroom assumed per request after a retraction
CLIP_MAX_NEW_TOKENS = 4096  # SGLang's clip on max_new_tokens when it budgets a prefill batch


class EngineCore:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        chunk = cache_chunk_size(config.mamba_chunk_size, config.semantics)
        tree = MambaRadixTree(
            KVPool(config.kv_tokens),
            StatePool(config.state_slots),
            make_policy(config.policy, config.eff_weight),
            page_size=config.page_size,
            chunk_size=chunk,
            semantics=config.semantics,
        )
        host = None
        if config.host_kv_tokens > 0 and config.cache != "disabled":
            host = HostTier(config.host_kv_tokens, max(1, config.host_state_slots), page_size=config.page_size,
                            chunk_size=chunk, kv_only=config.host_kv_only)
        self.host = host
        self.strategy: Strategy = make_strategy(
            config.cache, tree, chunked_prefill_size=config.chunked_prefill_size,
            track_interval=config.track_interval, overlap=config.overlap, host=host,
        )
        self.tree = tree
        by_slots = config.state_slots // state_ratio(config)
        if by_slots < 1:
            raise ValueError(
                f"{config.state_slots} state slots cannot hold one running request ({state_ratio(config)} each)"
            )
        self.max_running = min(config.max_running_requests or by_slots, by_slots)
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.chunked: EngineRequest | None = None
        self.new_token_ratio = config.init_new_token_ratio
        self.counters = EngineCounters()

    # ------------------------------------------------------------------ intake
    def add_request(
        self, rid: int, input_tokens: Sequence[int], max_new_tokens: int, *, max_prefix: int | None = None
    ) -> EngineRequest:
        # A hashable sequence is immutable (a tuple, a trace row's TokenIds): kept as is. Copying a compact one
        # into a tuple held every waiting request's prompt as Python ints (the seglen preset: 1.6 GB).
        held = input_tokens if isinstance(input_tokens, Hashable) else tuple(input_tokens)
        req = EngineRequest(rid, held, max(1, max_new_tokens), max_prefix=max_prefix)
        if not fits_kv_pool(len(req.input_tokens), req.max_new_tokens, self.config.kv_tokens):
            req.status, req.error = "aborted", "input + output longer than the KV pool"
            self.counters.aborted += 1
            return req
        self.waiting.append(req)
        return req

    def abort(self, req: EngineRequest, reason: str = "aborted") -> None:
        """Drop a request between steps (client gone): free what it holds, cache nothing."""
        if req.status in ("finished", "aborted"):
            return
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
        if self.chunked is req:
            self.chunked = None
        if req.cached is not None:
            self.strategy.release(req.cached)
            req.cached = None
        req.status, req.error, req.prompt_tuple = "aborted", reason, None
        self.counters.aborted += 1

    @property
    def idle(self) -> bool:
        return not (self.waiting or self.running or self.chunked)

    # ------------------------------------------------------------------ memory views
    def _kv_headroom(self) -> int:
        """KV tokens obtainable now, minus what running requests will still decode."""
        tree = self.tree
        reserve = sum(min(r.remaining, 1 << 30) for r in self.running) * self.new_token_ratio
        return int(tree.kv_pool.available + tree.kv_evictable - reserve)

    def _state_headroom(self) -> int:
        return self.tree.state_pool.available + self.tree.state_evictable

    def track_peaks(self) -> None:
        tree = self.tree
        c = self.counters
        c.peak_kv_used = max(c.peak_kv_used, tree.kv_pool.size - tree.kv_pool.available)
        c.peak_states_used = max(c.peak_states_used, tree.state_pool.size - tree.state_pool.available)

    # ------------------------------------------------------------------ scheduling
    def schedule(self) -> Batch | None:
        """Plan the next forward and reserve its memory; None when there is nothing to run."""
        batch = self._schedule_prefill()
        if batch is None and self.running:
            batch = self._schedule_decode()
        if batch is not None:
            self.track_peaks()
        return batch

    def _order_waiting(self) -> list[EngineRequest]:
        if self.config.schedule_policy == "fcfs" or self.config.cache == "disabled" or len(self.waiting) > 128:
            return list(self.waiting)  # SGLang falls back to FCFS for long queues
        limit = self.tree.page_size

        def hit(req: EngineRequest) -> int:
            toks = req.fill_tokens
            return self.tree.match_prefix(toks[: page_floor(max(0, len(toks) - 1), limit)]).prefix_len

        return sorted(self.waiting, key=lambda r: -hit(r))  # stable: FCFS among equal matches

    def _schedule_prefill(self) -> Batch | None:
        """Form an extend batch as SGLang does: match and lock each request in turn (PrefillAdder), then allocate
        for the whole batch at once (alloc_for_extend: the state slots and their eviction budget, then KV)."""
        cfg = self.config
        budget = cfg.max_prefill_tokens
        chunk_budget = cfg.chunked_prefill_size
        items: list[BatchItem] = []
        continuing = 0
        batch_reserve = pending_states = 0
        if self.chunked is not None:
            item = self._chunk_extent(self.chunked, min(budget, chunk_budget))
            if item is None:
                return None
            items.append(item)
            continuing = 1
            budget -= item.end - item.start
            chunk_budget -= item.end - item.start
            batch_reserve = item.end - item.start  # its KV comes with the batch's, after the admissions
        if self.chunked is None or items[0].end == len(self.chunked.fill_tokens):
            for req in self._order_waiting():
                if budget <= 0 or chunk_budget <= 0 or len(self.running) + len(items) >= self.max_running:
                    break
                if not self._admit(req, batch_reserve, pending_states):
                    self.counters.admission_blocked += 1
                    break
                assert req.cached is not None
                item = self._chunk_extent(req, min(budget, chunk_budget))
                if item is None:  # admitted but its first chunk does not fit: back to waiting
                    self._unadmit(req)
                    self.counters.admission_blocked += 1
                    break
                items.append(item)
                pending_states += self.strategy.pending_slots(req.cached)
                # SGLang's PrefillAdder reserves each admitted request's prompt and its outputs (clipped) before it
                # considers the next one.
                batch_reserve += len(req.fill_tokens) - item.start + min(req.remaining, CLIP_MAX_NEW_TOKENS)
                budget -= item.end - item.start
                chunk_budget -= item.end - item.start
                if item.end < len(req.fill_tokens):
                    break  # the rest of this prompt goes in later batches
        items = self._alloc_batch(items, continuing)
        if not items:
            return None
        for item in items[continuing:]:
            self.waiting.remove(item.request)
            if not item.request.retractions:  # its first run: a miss's load-back (with the slots) counts as cached
                item.request.cached_tokens = item.start  # the prefix it reuses, a load-back included
        if continuing and items[0].end == len(items[0].request.fill_tokens):
            self.chunked = None
        if items[-1].end < len(items[-1].request.fill_tokens):
            self.chunked = items[-1].request
        self.counters.prefill_batches += 1
        return Batch("prefill", tuple(items))

    def _alloc_batch(self, items: list[BatchItem], continuing: int) -> list[BatchItem]:
        """The batch's allocation: state slots once for all (Strategy.alloc_slots), then KV: evicted for the batch's
        total once (Strategy.evict_for_extend_kv), then taken per request. The items that got theirs, in order; a new
        request that did not goes back to waiting with those after it."""
        new = [i.request.cached for i in items[continuing:]]
        try:
            self.strategy.alloc_slots([c for c in new if c is not None], continuing)
        except PoolExhausted as exc:
            self._slots_failed(exc)
        ready: list[BatchItem] = []
        for pos, planned in enumerate(items):
            cached = planned.request.cached
            assert cached is not None
            if pos >= continuing and self.strategy.pending_slots(cached) > 0:
                break
            item = planned
            if cached.kv_len > planned.start:  # a miss's load-back from the host tier: the chunk starts after it
                item = self._chunk_extent(planned.request, planned.end - planned.start) or planned
            ready.append(item)
        self.strategy.evict_for_extend_kv([i.end - i.start for i in ready])  # once, for the batch's total
        kept: list[BatchItem] = []
        for item in ready:
            assert item.request.cached is not None
            try:
                self.strategy.alloc_chunk(item.request.cached, item.end)
            except PoolExhausted:
                break
            kept.append(item)
        if len(kept) < len(items):
            self.counters.admission_blocked += 1
            if len(kept) < continuing:  # the chunked request's next chunk does not fit: no batch at all
                kept = []
            for item in items[max(len(kept), continuing):]:
                self._unadmit(item.request)
        return kept

    def _slots_failed(self, exc: PoolExhausted) -> None:
        """The batch's state slots ran out (the admission checks make it rare). Here nothing more: ``_alloc_batch``
        sends the requests without theirs back to waiting. The fault-injecting server (reference_impl.server.faults)
        dies here instead, as SGLang without its mamba pool check does."""

    def _admit(self, req: EngineRequest, batch_reserve: int = 0, pending_states: int = 0) -> bool:
        """Match and lock (slots and KV come with the batch); False (and nothing held) if either pool cannot take
        the request now, counting what the batch's earlier requests will still take."""
        if self._state_headroom() - pending_states < state_ratio(self.config):
            return False
        try:
            cached = self.strategy.match_request(req.fill_tokens, req.max_prefix)
        except PoolExhausted:
            return False
        return self._take(req, cached, batch_reserve)

    def _take(self, req: EngineRequest, cached: CachedRequest, batch_reserve: int) -> bool:
        """Keep a matched request if the KV pool can carry it, else give everything back."""
        extend = len(req.fill_tokens) - cached.prefix_len
        if extend + req.remaining * self.new_token_ratio > self._kv_headroom() - batch_reserve:
            self.strategy.release(cached)
            return False
        req.cached = cached
        if req.cached_tokens is None:
            req.cached_tokens = cached.prefix_len
        req.status = "running"
        return True

    def _unadmit(self, req: EngineRequest) -> None:
        assert req.cached is not None
        self.strategy.release(req.cached)
        req.cached = None
        req.status = "waiting"

    def _chunk_extent(self, req: EngineRequest, budget: int) -> BatchItem | None:
        """The next forward's part of ``req``'s prompt within ``budget`` tokens (allocated with the batch)."""
        cached = req.cached
        assert cached is not None
        start = cached.kv_len
        end = min(cached.input_len, start + budget)
        if end < cached.input_len:
            end = max(start, page_floor(end, self.tree.page_size))
        if end <= start:
            return None
        return BatchItem(req, start, end, start)

    def _schedule_decode(self) -> Batch | None:
        tree = self.tree
        while self.running and tree.kv_pool.available + tree.kv_evictable < self.strategy.decode_kv_need(
                [r.cached for r in self.running if r.cached is not None]):
            self._retract_one()
        if not self.running:
            return None
        feeding = [r.cached for r in self.running if r.cached is not None
                   and len(r.cached.tokens) > r.cached.kv_len + r.cached.kv_reserved]
        self.strategy.evict_for_decode_kv(len(feeding))  # the step's KV is one allocation (alloc_for_decode)
        for cached in feeding:
            self.strategy.reserve_decode_kv(cached)  # KV for the token this step feeds in
        if self.strategy.aborts_pending:
            for req in list(self.running):
                if req.cached is not None and (reason := self.strategy.abort_reason(req.cached)) is not None:
                    self.abort(req, reason)
            if not self.running:
                return self._schedule_prefill()  # its memory is free again
        self.counters.decode_steps += 1
        self.new_token_ratio = max(
            self.config.min_new_token_ratio, self.new_token_ratio - self.config.new_token_ratio_decay
        )
        items = []
        for req in self.running:
            assert req.cached is not None
            ctx = req.cached.kv_len
            items.append(BatchItem(req, ctx, ctx + 1, ctx))
        return Batch("decode", tuple(items))

    def _retract_one(self) -> None:
        victim = min(self.running, key=lambda r: (len(r.output), -len(r.input_tokens), -r.rid))
        self.running.remove(victim)
        assert victim.cached is not None
        self.strategy.write_back(victim.cached)
        self.strategy.release(victim.cached)
        victim.cached = None
        victim.status = "waiting"
        victim.retractions += 1
        self.counters.retractions += 1
        self.waiting.appendleft(victim)
        total_decoded = sum(len(r.output) for r in self.running)
        total_max = sum(r.max_new_tokens for r in self.running) or 1
        self.new_token_ratio = min(1.0, (total_decoded + RETRACT_DECODE_STEPS * len(self.running)) / total_max)

    # ------------------------------------------------------------------ completion
    def complete(self, batch: Batch, next_tokens: Sequence[int]) -> list[EngineRequest]:
        """Apply one sampled token per request that produced one; return the requests that finished."""
        finished: list[EngineRequest] = []
        if batch.kind == "prefill":
            sampling = [i for i in batch.items if i.end == i.request.cached.input_len]  # type: ignore[union-attr]
            if len(next_tokens) != len(sampling):
                raise ValueError(f"prefill batch samples {len(sampling)} tokens, got {len(next_tokens)}")
            tokens = iter(next_tokens)
            for item in batch.items:
                req, cached = item.request, item.request.cached
                assert cached is not None
                done_after = item.end == cached.input_len and req.remaining <= 1
                self.strategy.complete_chunk(cached, item.start, finishes_after_prefill=done_after)
                if item.end == cached.input_len:
                    self._append(req, next(tokens), finished)
                    if req.status == "running":
                        self.running.append(req)
        else:
            if len(next_tokens) != len(batch.items):
                raise ValueError(f"decode step samples {len(batch.items)} tokens, got {len(next_tokens)}")
            self.strategy.begin_decode_step([i.request.cached for i in batch.items if i.request.cached is not None])
            for item, tok in zip(batch.items, next_tokens, strict=True):
                self._append(item.request, tok, finished)
            self.strategy.end_decode_step()
            self.running = [r for r in self.running if r.status == "running"]
        return finished

    def finish_done(self, requests: Sequence[EngineRequest]) -> list[EngineRequest]:
        """Finish, in order, each of ``requests`` (decoded by a run) that has sampled all its tokens."""
        finished: list[EngineRequest] = []
        for req in requests:
            if req.remaining <= 0:
                self._finish(req, finished)
        if finished:
            self.running = [r for r in self.running if r.status == "running"]
        return finished

    def _append(self, req: EngineRequest, token: int, finished: list[EngineRequest]) -> None:
        cached = req.cached
        assert cached is not None
        if cached.kv_len >= cached.input_len and len(cached.tokens) > cached.input_len:
            self.strategy.decode(cached, [token])  # KV for the previous sampled token is committed now
        else:
            cached.tokens.append(token)
        req.output.append(token)
        if req.remaining <= 0:
            self._finish(req, finished)

    def _finish(self, req: EngineRequest, finished: list[EngineRequest]) -> None:
        assert req.cached is not None
        self.strategy.finish(req.cached)
        req.cached = None
        req.status, req.prompt_tuple = "finished", None
        finished.append(req)
