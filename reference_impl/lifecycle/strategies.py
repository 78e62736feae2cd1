"""The strategies (``no_buffer``, ``extra_buffer``, ``tokenspeed``, ``disabled``) and the registry that names them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reference_impl.lifecycle.request import CachedRequest
from reference_impl.lifecycle.strategy import Strategy
from reference_impl.lifecycle.tokenspeed_pool import PageHold, StateLeaves, evict_pages, evict_states, insert_kv
from reference_impl.radix.key import page_floor
from reference_impl.radix.node import Node
from reference_impl.radix.pools import PoolExhausted
from reference_impl.radix.tree import MambaRadixTree

__all__ = [
    "STRATEGIES", "DisabledStrategy", "ExtraBufferStrategy", "NoBufferStrategy", "TokenSpeedStrategy", "make_strategy",
]


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
        return 2 if self.overlap else 1

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

    def _on_decode(self, req: CachedRequest, start: int, end: int) -> None:
        interval = self.track_interval
        last = end // interval * interval
        if last > start:
            self._track(req, last)

    def _track(self, req: CachedRequest, position: int) -> None:
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
        donated = req.track_slots.pop()  # the newest tracked state goes to the tree
        try:
            req.track_slots.insert(0, self._alloc_state(protect=req.lock.node if req.lock else None))
        except PoolExhausted:
            req.track_slots.append(donated)
            self.counters.state_alloc_failures += 1
            req.track_seqlen = None
            return
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


class TokenSpeedStrategy(ExtraBufferStrategy):
    """TokenSpeed's radix-era hybrid cache (PR #162, ``tokenspeed-scheduler`` 0.1.0; research/tokenspeed.md).

    Checked hit by hit against the real scheduler on CPU (tests/tokenspeed/test_scheduler_oracle.py): each
    prefill forward keeps one checkpoint, at its last page-aligned point, even when the match's branch point
    falls inside it (SGLang's extra_buffer keeps the branch point instead); nothing is tracked during decode;
    a running request holds two state slots (working + checkpoint); a finished request writes every checkpoint
    on its path back to the host, and a hit is loaded back (with the path's checkpoints) only when the device
    has none (a deeper host prefix behind a shorter device hit stays on the host).
    """

    name = "tokenspeed"

    def __init__(self, tree: MambaRadixTree, **kwargs: Any) -> None:
        super().__init__(tree, **kwargs)
        self._holds: dict[int, PageHold] = {}  # by id() of a running request's CachedRequest
        self._leaves = StateLeaves()

    def track_position(self, req: CachedRequest, start: int, end: int) -> int | None:
        chunk = self.tree.chunk_size
        track = end // chunk * chunk
        return track if track > start else None

    def _on_decode(self, req: CachedRequest, start: int, end: int) -> None:
        return

    def _num_track_slots(self) -> int:
        return 1

    # ------------------------------------------------------------ pools under pressure (lifecycle.tokenspeed_pool)
    def _alloc_state(self, protect: Node | None = None) -> int:
        evict_states(self.tree, self._leaves, 1)  # a running request's path is never a victim: ``protect`` is on it
        slot = self.tree.state_pool.alloc()
        if slot is None:
            raise PoolExhausted("Can not alloc mamba cache")
        return slot

    def _hold(self, req: CachedRequest) -> PageHold | None:
        return self._holds.get(id(req))

    def alloc_chunk(self, req: CachedRequest, end: int) -> None:
        tree, ps = self.tree, self.tree.page_size
        tokens = end - req.kv_len
        hold = self._hold(req)
        if hold is None:  # the first chunk also reserves the decode input's position
            evict_pages(tree, self._leaves, -(-(tokens + 1) // ps))
            hold = PageHold(req.kv_len, req.kv_len)
            hold.acquire(tree, tokens + 1)
            self._holds[id(req)] = hold
        else:
            evict_pages(tree, self._leaves, -(-tokens // ps))
            self._renew_checkpoint(req)
            hold.acquire(tree, tokens)
        req.kv_len = end

    def reserve_decode_kv(self, req: CachedRequest, n: int = 1) -> None:
        hold = self._hold(req)
        assert hold is not None
        evict_pages(self.tree, self._leaves, -(-max(0, n - hold.tail(self.tree.page_size)) // self.tree.page_size))
        if not hold.decoding:
            hold.decoding = True
            self._renew_checkpoint(req)
        hold.acquire(self.tree, n)
        req.kv_reserved += n

    def _renew_checkpoint(self, req: CachedRequest) -> None:
        """A free slot first, kept or not; then a fresh checkpoint slot if the last went to the tree."""
        evict_states(self.tree, self._leaves, 1)
        if not req.track_slots:
            req.track_slots.append(self._alloc_state())

    def cache_unfinished(self, req: CachedRequest) -> None:
        # The checkpoint goes to the tree; its replacement is taken when the next forward is scheduled.
        if req.track_seqlen is not None and req.track_seqlen > req.protected_len:
            self._insert(req, req.track_seqlen, req.track_slots.pop())
        req.track_seqlen = None

    def _insert(self, req: CachedRequest, cache_len: int, slot: int) -> None:
        before = req.protected_len
        super()._insert(req, cache_len, slot)
        assert req.lock is not None
        self._leaves.track(self.tree, req.lock.node)
        if (hold := self._hold(req)) is not None:
            hold.give(req.protected_len - before, self.tree.page_size)

    def finish(self, req: CachedRequest) -> None:
        cache_len = req.track_seqlen or 0
        if cache_len > req.protected_len:
            self._insert(req, cache_len, req.track_slots.pop())
        hold = self._hold(req)
        end = page_floor(len(req.tokens), self.tree.page_size)
        if hold is not None and end > req.protected_len:
            insert_kv(self.tree, req.prefix(end), req.protected_len)
            hold.give(end - req.protected_len, self.tree.page_size)
        self.write_back(req)
        self.release(req)

    def release(self, req: CachedRequest) -> None:
        hold = self._holds.pop(id(req), None)
        if hold is not None:
            self.tree.kv_pool.free(hold.pages * self.tree.page_size)
            req.kv_len, req.kv_reserved = req.protected_len, 0
        super().release(req)

    def _load_back(self, req: CachedRequest, limit: int) -> None:
        if req.prefix_len > 0:
            return  # the scheduler looks at the host tier only when the device gives no hit at all
        super()._load_back(req, limit)
        if self.host is None or req.prefix_len == 0 or req.lock is None:
            return
        # The load-back brings the host path's earlier checkpoints too, each a device state again.
        host = self.host.tree
        node: Node | None = host.match_prefix(req.tokens[: req.prefix_len]).last_node.parent
        while node is not None and node is not host.root:
            content = host.state_pool.content.get(node.state) if node.state is not None else None
            if content is not None:
                try:
                    slot = self._alloc_state(protect=req.lock.node)
                except PoolExhausted:
                    return
                self.tree.state_pool.write(slot, content)
                inserted = self.tree.insert(req.tokens[: node.depth], slot, prev_prefix_len=node.depth)
                if inserted.state_exists:
                    self.tree.state_pool.free(slot)
                else:
                    self._leaves.track(self.tree, inserted.node)
                self.host.counters.load_back_states += 1
            node = node.parent

    def write_back(self, req: CachedRequest) -> None:
        """Every checkpoint on the request's cached path goes to the host, not only the last."""
        if self.host is None or req.protected_len == 0 or req.lock is None:
            return
        depths = []
        node: Node | None = req.lock.node
        while node is not None and node is not self.tree.root:
            if node.state is not None and node.depth <= req.protected_len:
                depths.append(node.depth)
            node = node.parent
        for depth in sorted(depths):
            self.host.write_back(req.tokens[:depth], req.fingerprint(depth))


class DisabledStrategy(Strategy):
    """``--disable-radix-cache``: no matching, no insertion; a request holds one state slot."""

    name = "disabled"

    def admit(self, input_tokens: Sequence[int], max_prefix: int | None = None) -> CachedRequest:
        req = CachedRequest.of(input_tokens)
        req.lock = self.tree.lock(self.tree.root)
        slot = self.tree.state_pool.alloc()
        if slot is None:
            self.release(req)
            raise PoolExhausted("Not enough space for mamba cache")
        req.live_state = slot
        self.tree.state_pool.write(slot, req.fingerprint(0))
        return req

    def cache_unfinished(self, req: CachedRequest) -> None:
        return

    def finish(self, req: CachedRequest) -> None:
        self.release(req)


STRATEGIES: dict[str, type[Strategy]] = {
    s.name: s for s in (NoBufferStrategy, ExtraBufferStrategy, TokenSpeedStrategy, DisabledStrategy)
}


def make_strategy(name: str, tree: MambaRadixTree, **kwargs: object) -> Strategy:
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise KeyError(f"unknown strategy {name!r}; choose one of {', '.join(sorted(STRATEGIES))}") from None
    return cls(tree, **kwargs)  # type: ignore[arg-type]
