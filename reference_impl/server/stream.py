"""Per-stream memory bounds: what a client that stops reading may cost the server.

Updates are cumulative (each holds the whole output so far), so queueing one per token for a client that does
not read grew the process by ~800 MB in a minute (O(n^2) in the output). A stream instead keeps only its newest
update (``Latest``), as SGLang's tokenizer manager coalesces outputs a slow client has not taken yet; and a write
that cannot drain for ``STALL_S`` (the client's socket buffer is full: it stopped reading) drops the stream,
aborting the request and counting it (``sglang:num_dropped_streams_total``).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from reference_impl.server.engine_loop import Update

__all__ = ["STALL_S", "Latest", "StreamStalled", "write_or_drop"]

STALL_S = 30.0


class StreamStalled(Exception):
    """The client has not read its stream for ``STALL_S``: the handler drops it."""


class Latest:
    """A one-slot mailbox: the newest update replaces an unread one; the final update is never replaced."""

    def __init__(self) -> None:
        self._update: Update | None = None
        self._ready = asyncio.Event()

    def put(self, update: Update) -> None:
        if self._update is not None and self._update.finished:
            return
        self._update = update
        self._ready.set()

    async def get(self) -> Update:
        await self._ready.wait()
        update = self._update
        assert update is not None
        self._update = None
        self._ready.clear()
        return update


async def write_or_drop(resp: web.StreamResponse, data: bytes, stall_s: float = STALL_S) -> None:
    """``resp.write`` waits while the transport's buffer is above its high-water mark; a client that never reads
    would hold the handler (and its request's slots) forever."""
    try:
        await asyncio.wait_for(resp.write(data), timeout=stall_s)
    except asyncio.TimeoutError:
        raise StreamStalled from None
