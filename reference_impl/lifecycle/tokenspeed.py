"""TokenSpeed's strategy: ``extra_buffer``'s request flow with TokenSpeed's checkpoints, pools and tree walks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reference_impl.host_tier import HostTier
from reference_impl.lifecycle.request import CachedRequest
from reference_impl.lifecycle.strategies import ExtraBufferStrategy
from reference_impl.lifecycle.tokenspeed_host import host_state, mirror_walk, release_written, write_back_path
from reference_impl.lifecycle.tokenspeed_pool import PageHold, StateLeaves, evict_pages, evict_states
from reference_impl.lifecycle.tokenspeed_walk import ts_insert, ts_match
from reference_impl.radix.key import page_floor
from reference_impl.radix.node import Node
from reference_impl.radix.pools import PoolExhausted
from reference_impl.radix.tree import MambaRadixTree

__all__ = ["TokenSpeedStrategy"]


class TokenSpeedStrategy(ExtraBufferStrategy):
    """TokenSpeed's radix-era hybrid cache (PR #162, ``tokenspeed-scheduler`` 0.1.0; docs/engines/tokenspeed.md).

    Checked hit by hit against the real scheduler on CPU (tests/tokenspeed/test_scheduler_oracle.py): each
    prefill forward keeps one checkpoint, at its last page-aligned point, even when the match's branch point
    falls inside it (SGLang's extra_buffer keeps the branch point instead); nothing is tracked during decode;
    a running request holds two state slots (working + checkpoint); with the Mamba host tier a finished request
    writes back the part of its path the host lacks and its device copies are then released
    (``tokenspeed_host``), and a host state deeper than the device's is loaded back alone; without a host tier,
    a lone request whose first decode step finds no state slot is aborted (``abort_reason``).
    """

    name = "tokenspeed"

    def __init__(self, tree: MambaRadixTree, **kwargs: Any) -> None:
        super().__init__(tree, **kwargs)
        self._holds: dict[int, PageHold] = {}  # by id() of a running request's CachedRequest
        self._leaves = StateLeaves()
        self._doomed: set[int] = set()  # id() of requests the scheduler aborts (abort_reason)
        self._stalled: set[int] = set()  # id() of requests that ran on where the scheduler would wait

    def track_position(self, req: CachedRequest, start: int, end: int) -> int | None:
        chunk = self.tree.chunk_size
        track = end // chunk * chunk
        return track if track > start else None

    def _on_decode(self, req: CachedRequest, start: int, end: int) -> None:
        return

    def _num_track_slots(self) -> int:
        return 1

    def alloc_slots(self, reqs: Sequence[CachedRequest], continuing: int = 0) -> None:
        return  # TokenSpeed takes a request's slots when it matches it (match_request)

    def match_request(self, input_tokens: Sequence[int], max_prefix: int | None = None) -> CachedRequest:
        """``schedulePrefillFirstChunk``: match (stamping the whole KV match), lock, make room for the first
        chunk's pages, then for the working and checkpoint slots (COW from the hit)."""
        tree = self.tree
        req = CachedRequest.of(input_tokens)
        limit = page_floor(max(0, req.input_len - 1), tree.page_size)  # always recompute >= 1 token
        if max_prefix is not None:
            limit = min(limit, page_floor(max(0, max_prefix), tree.page_size))
        match = ts_match(tree, req.prefix(limit))
        self._mirror(req.prefix(limit))
        req.prefix_len = req.protected_len = req.kv_len = match.prefix_len
        req.branch_seqlen = match.branch_seqlen
        req.lock = tree.lock(match.last_node)
        try:
            if self._l2 is None:
                if self.host is None:  # a KV-only host tier: the load-back decides where the first chunk starts
                    first = req.input_len - req.prefix_len
                    first = min(first, self.chunked_prefill_size or first)
                    evict_pages(tree, self._leaves, -(-(first + 1) // tree.page_size))
                self._seed_live_state(req, self._alloc_state(), match.last_node)
                if self.host is not None:
                    self._load_back(req, limit)
            else:
                self._first_chunk_with_host(req, limit, match.last_node)
            req.track_slots.append(self._alloc_state())
        except PoolExhausted:
            self.release(req)
            raise
        return req

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

    def evict_for_extend_kv(self, extend_lens: Sequence[int]) -> None:
        return  # TokenSpeed evicts pages request by request (alloc_chunk)

    def evict_for_decode_kv(self, num_reqs: int) -> None:
        return  # and per decoding request (reserve_decode_kv)

    def decode_kv_need(self, running: Sequence[CachedRequest]) -> int:
        """A whole page for each request whose last page is full, nothing for the others."""
        ps = self.tree.page_size
        return sum(ps for r in running if (hold := self._hold(r)) is None or hold.tail(ps) <= 0)

    def reserve_decode_kv(self, req: CachedRequest, n: int = 1) -> None:
        hold = self._hold(req)
        assert hold is not None
        evict_pages(self.tree, self._leaves, -(-max(0, n - hold.tail(self.tree.page_size)) // self.tree.page_size))
        if not hold.decoding:
            hold.decoding = True
            if not self._renew_checkpoint(req, first_decode=True):
                return
        hold.acquire(self.tree, n)
        req.kv_reserved += n

    @property
    def aborts_pending(self) -> bool:
        return bool(self._doomed)

    def abort_reason(self, req: CachedRequest) -> str | None:
        return "no state slot for its first decode step" if id(req) in self._doomed else None

    def _renew_checkpoint(self, req: CachedRequest, first_decode: bool = False) -> bool:
        """Scheduling the next forward, after its pages: a free slot first, then the previous forward's checkpoint
        goes to the tree with its pages (duplicates freed only now), then a fresh checkpoint slot. False: the
        request is to be aborted."""
        evict_states(self.tree, self._leaves, 1)
        if self.tree.state_pool.available < 1:
            self.counters.state_alloc_failures += 1
            if first_decode and self.host is None and len(self._holds) == 1 and id(req) not in self._stalled:
                # Its decode op is the plan's only one, so the scheduler retracts it, and with no host tier to write
                # it to, aborts it (forward.cpp:213-218, 655-666, 401-411): its last chunk is never inserted.
                self._doomed.add(id(req))
                return False
            # The scheduler waits here for ever (a later chunk), or while others run (a first decode step); the
            # reference runs the forward without a checkpoint slot, and never aborts such a request later.
            self._stalled.add(id(req))
            self._publish(req)
            return True
        self._publish(req)
        if not req.track_slots:
            req.track_slots.append(self._alloc_state())
        return True

    def _on_forward(self, req: CachedRequest, start: int, end: int) -> None:
        if req.track_slots:  # no checkpoint slot (``_renew_checkpoint`` failed): nothing to track
            super()._on_forward(req, start, end)

    def _publish(self, req: CachedRequest) -> None:
        if req.track_seqlen is not None and req.track_seqlen > req.protected_len:
            self._insert(req, req.track_seqlen, req.track_slots.pop())
        req.track_seqlen = None

    def cache_unfinished(self, req: CachedRequest) -> None:
        return  # the checkpoint waits for the request's next forward (``_renew_checkpoint``)

    def _insert(self, req: CachedRequest, cache_len: int, slot: int) -> None:
        """Insert ``tokens[:cache_len]`` with ``slot`` as TokenSpeed's walk does; re-lock the request there."""
        tree, before = self.tree, req.protected_len
        result = ts_insert(tree, req.prefix(cache_len), slot, before)
        self._mirror(req.prefix(cache_len))
        self.counters.states_inserted += 1
        if result.state_exists:
            self.counters.states_duplicate += 1
            tree.state_pool.free(slot)
        else:
            self._leaves.track(tree, result.node)
        assert req.lock is not None
        tree.unlock(req.lock)
        req.lock = tree.lock(result.node)
        req.protected_len = max(before, cache_len)
        if (hold := self._hold(req)) is not None:
            hold.give(req.protected_len - before, tree.page_size)

    def finish(self, req: CachedRequest) -> None:
        cache_len = req.track_seqlen or 0
        if cache_len > req.protected_len:
            self._insert(req, cache_len, req.track_slots.pop())
        hold = self._hold(req)
        end = page_floor(len(req.tokens), self.tree.page_size)
        assert req.lock is not None
        leaf = req.lock.node
        if hold is not None and end > req.protected_len:
            leaf = ts_insert(self.tree, req.prefix(end), None, req.protected_len).node
            self._mirror(req.prefix(end))
            hold.give(end - req.protected_len, self.tree.page_size)
        ts_match(self.tree, req.prefix(end))  # the scheduler matches the whole sequence again (write-back's match)
        self._mirror(req.prefix(end))
        if self._l2 is None:
            self.write_back(req)
            self.release(req)
            return
        path: list[Node] = []
        node: Node | None = leaf
        while node is not None and node is not self.tree.root:
            path.append(node)
            node = node.parent
        tokens = req.tokens[: leaf.depth]
        written = write_back_path(self._l2, tokens, path[::-1], self.tree.clock, req.fingerprint)
        self.release(req)  # the write-back is acknowledged at once: the request's lock goes first
        if written:
            release_written(self.tree, self._leaves, self._l2.tree, tokens, leaf)

    def release(self, req: CachedRequest) -> None:
        self._doomed.discard(id(req))
        self._stalled.discard(id(req))
        hold = self._holds.pop(id(req), None)
        if hold is not None:
            self.tree.kv_pool.free(hold.pages * self.tree.page_size)
            req.kv_len, req.kv_reserved = req.protected_len, 0
        super().release(req)

    @property
    def _l2(self) -> HostTier | None:
        """The host tier when TokenSpeed's Mamba host tier is on (its one-tree model, ``tokenspeed_host``)."""
        return self.host if self.host is not None and not self.host.kv_only else None

    def _mirror(self, tokens: Sequence[int]) -> None:
        if (l2 := self._l2) is not None:
            mirror_walk(l2.tree, tokens, self.tree.clock)

    def _first_chunk_with_host(self, req: CachedRequest, limit: int, matched: Node) -> None:
        """``schedulePrefillFirstChunk`` with the Mamba host tier (forward.cpp:82-165): a host state deeper than the
        device's is loaded back, with the KV the device lacks and that state alone, the pages made room for with
        the first chunk's and the slots with the request's two."""
        l2 = self._l2
        assert l2 is not None and req.lock is not None
        tree, ps = self.tree, self.tree.page_size
        depth, content = host_state(l2.tree, req.tokens[:limit])
        load = depth > req.prefix_len and content is not None
        start = depth if load else req.prefix_len
        first = req.input_len - start
        first = min(first, self.chunked_prefill_size or first)
        evict_pages(tree, self._leaves, -(-((start - req.protected_len) + first + 1) // ps))
        evict_states(tree, self._leaves, 3 if load else 2)
        self._seed_live_state(req, self._alloc_state(), matched)
        if not load or content is None:
            return
        slot = self._alloc_state()
        if not tree.kv_pool.alloc(depth - req.protected_len):
            tree.state_pool.free(slot)
            return
        tree.state_pool.write(slot, content)
        req.kv_len = depth
        self._insert(req, depth, slot)  # the device holds KV and state for the host's prefix again
        assert req.live_state is not None
        tree.state_pool.write(req.live_state, content)  # COW from the loaded state
        self.counters.state_copies += 1
        l2.record_load_back(depth - req.prefix_len)
        req.prefix_len = depth

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
