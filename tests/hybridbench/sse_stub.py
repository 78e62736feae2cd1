"""A one-request HTTP server that streams given SSE events to a load client, one event per write.

The load clients' tests replay streams recorded from real servers through it (they pass the events; this invents
none): the request body the client sent is kept, and the time each event was written, so a test can place the
client's token times between them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hybridbench.load import event_loop
from hybridbench.load.client import ClientResult
from hybridbench.load.http import StreamPool

__all__ = ["Streamed", "stream_events"]


@dataclass
class Streamed:
    result: ClientResult
    body: dict[str, Any]  # the JSON request body the client sent
    written: list[float] = field(default_factory=list)  # perf_counter() as each event was written


def stream_events(events: Sequence[str], call: Callable[[StreamPool], Awaitable[ClientResult]], *, gap_s: float,
                  loop: event_loop.EventLoop | None = None) -> Streamed:
    """``events`` (each ``data: ...`` without its blank line) streamed ``gap_s`` apart, chunked, to ``call(pool)``."""
    bodies: list[dict[str, Any]] = []
    written: list[float] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
        bodies.append(json.loads(await reader.readexactly(length)))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i, line in enumerate(events):
            if i:
                await asyncio.sleep(gap_s)
            event = f"{line}\n\n".encode()
            written.append(time.perf_counter())
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def run() -> ClientResult:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with StreamPool(f"http://127.0.0.1:{port}") as pool:
                return await call(pool)
        finally:
            server.close()

    result = event_loop.run(run(), loop or event_loop.default())
    [body] = bodies
    return Streamed(result, body, written)
