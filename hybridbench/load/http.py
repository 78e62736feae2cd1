"""A lean HTTP/1.1 keep-alive client for the load driver's streaming POSTs.

aiohttp spent most of the client's CPU per request (request and response objects, header multidicts,
a coroutine wake-up per SSE line); on a loaded machine that CPU shows up as TTFT and caps the request
rate. Here one ``asyncio.Protocol`` per connection parses the status line, headers and (chunked or
sized) body inside ``data_received`` and hands every complete SSE ``data:`` payload, with the time
its bytes arrived, straight to the request's handler: no task switch per line, one per request.

Failures surface as the exceptions the clients map to record statuses: ``TimeoutError`` (no complete
response within the request's timeout), ``ConnectionError`` (refused, reset or closed mid-response)
and ``ValueError`` (a response that is not HTTP/1.x, or a handler that cannot parse a payload).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

__all__ = ["DataHandler", "Response", "StreamPool"]

# One SSE ``data:`` payload (stripped) and the perf_counter() at which its bytes arrived; True stops the stream.
DataHandler = Callable[[bytes, float], bool]

_MAX_HEAD = 64 * 1024  # a status line plus headers longer than this is not a server we talk to
_MAX_ERROR_BODY = 64 * 1024  # of a non-200 body, only the start is kept (the record shows 200 characters)
# New connections the server has not answered yet, at most: a burst of connects overflows a small listen backlog
# (asyncio's 100, aiohttp's 128), and a dropped SYN is retried a second later, in its TTFT. Past the cap, requests wait.
MAX_UNANSWERED_CONNECTS = 64


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes  # a non-200 response's body (its start); empty for a 200 stream
    end: float  # perf_counter() when the stream ended: [DONE], the handler stopped it, or the body ended


class _StaleConnection(ConnectionError):
    """A reused keep-alive connection closed before any byte of the response: the server dropped it idle."""


class _Conn(asyncio.Protocol):
    """One connection, one request at a time: parse the response as its bytes arrive."""

    def __init__(self, pool: StreamPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.served = 0  # responses completed on this connection
        self.unanswered = False  # new, and no byte from the server yet: counts against the pool's cap
        self._waiter: asyncio.Future[Response] | None = None
        self._on_data: DataHandler | None = None

    # ------------------------------------------------------------- a request
    def start(self, request: bytes, on_data: DataHandler) -> asyncio.Future[Response]:
        assert self.transport is not None
        self._waiter = self.pool.loop.create_future()
        self._on_data = on_data
        self._buf = b""
        self._head_done = False
        self._status = 0
        self._keep_alive = True
        self._mode = ""  # chunked | length | close
        self._left = 0  # bytes left in the current chunk (chunked) or the body (length)
        self._chunk_tail = False  # a chunk's data was read; its CRLF is next
        self._trailers = False  # the last chunk was read; trailer lines until an empty one
        self._sse = b""  # an SSE line not yet complete
        self._error_body = bytearray()
        self._end: float | None = None  # [DONE] seen (or the handler stopped): the result's end time
        self._got_bytes = False
        self.transport.write(request)
        return self._waiter

    def time_out(self, timeout_s: float) -> None:
        self._fail(TimeoutError(f"no complete response within {timeout_s:g} s"))

    def abort(self, exc: BaseException) -> None:
        """Fail the pending request (timeout, cancellation) and drop the connection."""
        self._fail(exc)

    # ------------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self.answered()
        if self._waiter is None or self._waiter.done():
            return
        if isinstance(exc, KeyboardInterrupt):
            # A stop signal raised inside data_received: uvloop reports it as the transport's fatal error and closes
            # the connection. Handed to the waiting request it unwinds the run, as it would outside a callback;
            # taken for a dropped connection it was lost, and the run went on past a second Ctrl-C.
            self._fail(exc)
            return
        if self._head_done and self._mode == "close":
            self._finish()  # a body delimited by the connection's end is complete
        elif not self._got_bytes and self.served:
            self._fail(_StaleConnection("keep-alive connection closed before the response"))
        else:
            self._fail(ConnectionError(f"connection closed mid-response{f': {exc}' if exc else ''}"))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self._waiter is None:  # bytes nobody asked for: not a connection to reuse
            self._close()
            return
        self._got_bytes = True
        if self.unanswered:
            self.answered()
        try:
            self._feed(self._buf + data if self._buf else data, now)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a payload the handler cannot read
            self._fail(exc if isinstance(exc, ValueError) else ValueError(f"{type(exc).__name__}: {exc}"))

    # ------------------------------------------------------------- parsing
    def _feed(self, data: bytes, now: float) -> None:
        self._buf = b""
        pos = 0
        if not self._head_done:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                if len(data) > _MAX_HEAD:
                    raise ValueError("response headers exceed 64 KiB")
                self._buf = data
                return
            self._parse_head(data[:end].decode("latin-1"))
            pos = end + 4
        n = len(data)
        if self._mode == "chunked":
            piece, complete = self._dechunk(data, pos, n)
        elif self._mode == "length":
            take = min(self._left, n - pos)
            piece, self._left = data[pos:pos + take], self._left - take
            complete = self._left == 0
        else:  # close: the body runs to the connection's end
            piece, complete = data[pos:], False
        if piece:
            self._body(piece, now)
        if complete and not self.closed:
            self._finish(now)

    def _dechunk(self, data: bytes, pos: int, n: int) -> tuple[bytes, bool]:
        """The chunked body's data bytes in ``data[pos:]`` and whether its last chunk ended there."""
        left, tail, trailers = self._left, self._chunk_tail, self._trailers  # locals: this loop is per read
        pieces: list[bytes] = []
        complete = False
        while pos < n:
            if left:  # inside a chunk's data
                take = left if left < n - pos else n - pos
                pieces.append(data[pos:pos + take])
                pos += take
                left -= take
                tail = not left
                continue
            eol = data.find(b"\r\n", pos)  # a chunk-size line, the CRLF after a chunk's data, or a trailer line
            if eol < 0:
                self._buf = data[pos:]
                break
            line = data[pos:eol]
            pos = eol + 2
            if trailers:
                if not line:
                    complete = True
                    break
            elif tail:
                if line:
                    raise ValueError("malformed chunked body: no CRLF after a chunk")
                tail = False
            else:
                left = int(line.split(b";", 1)[0], 16)
                trailers = left == 0
        self._left, self._chunk_tail, self._trailers = left, tail, trailers
        return (pieces[0] if len(pieces) == 1 else b"".join(pieces)), complete

    def _parse_head(self, head: str) -> None:
        status_line, _, fields = head.partition("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP/1.x response: {status_line[:80]!r}")
        self._status = int(parts[1])
        keep_alive = parts[0] != "HTTP/1.0"
        mode = "close"
        for line in fields.lower().split("\r\n"):  # names and the values looked at are case-insensitive
            name, _, value = line.partition(":")
            name = name.strip()
            if name == "transfer-encoding":
                if "chunked" in value:
                    mode = "chunked"
            elif name == "content-length" and mode != "chunked":
                mode, self._left = "length", int(value)
            elif name == "connection":
                keep_alive = "close" not in value if keep_alive else "keep-alive" in value
        self._mode = mode
        self._keep_alive = keep_alive and mode != "close"
        self._head_done = True

    def _body(self, piece: bytes, now: float) -> None:
        if self._status != 200:
            if len(self._error_body) < _MAX_ERROR_BODY:
                self._error_body += piece
            return
        if self._end is not None:
            return  # after [DONE]: drain the body so the connection can be reused
        lines = (self._sse + piece if self._sse else piece).split(b"\n")
        self._sse = lines.pop()  # an incomplete last line waits for the next read
        on_data = self._on_data
        assert on_data is not None and self._waiter is not None
        for raw in lines:
            if not raw:
                continue  # the blank line ending an event: half of all lines
            line = raw if raw.startswith(b"data:") else raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self._end = now
                self._sse = b""
                self._waiter.set_result(Response(200, b"", now))
                return
            if on_data(payload, now):
                self._end = now
                self._waiter.set_result(Response(200, b"", now))
                self._close()  # the rest of the stream is unread: the connection cannot be reused
                return

    # ------------------------------------------------------------- endings
    def _finish(self, now: float | None = None) -> None:
        assert self._waiter is not None
        end = now if now is not None else time.perf_counter()
        if not self._waiter.done():
            body = bytes(self._error_body) if self._status != 200 else b""
            self._waiter.set_result(Response(self._status, body, self._end if self._end is not None else end))
        self.served += 1
        self._waiter, self._on_data = None, None
        if self._keep_alive and not self.closed:
            self.pool.release(self)
        else:
            self._close()

    def _fail(self, exc: BaseException) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self._close()

    def answered(self) -> None:
        """The server answered this new connection (or it ended): it no longer counts against the cap."""
        if self.unanswered:
            self.unanswered = False
            self.pool.settle_connect()

    def _close(self) -> None:
        self.closed = True
        self.answered()
        if self.transport is not None:
            self.transport.close()


class StreamPool:
    """Keep-alive connections to one ``http://host:port[/prefix]`` server, opened as needed, never capped."""

    def __init__(self, base_url: str, headers: Callable[[str], Mapping[str, str]] | None = None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the load client speaks plain http://host:port, not {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self._host_header = parts.netloc.rsplit("@", 1)[-1]
        self._heads: dict[str, bytes] = {}  # each path's request line and headers, up to the body's length
        self._headers = headers or (lambda _path: {})  # path -> what else it carries (engines/server_auth.py: a key)
        self._idle: list[_Conn] = []
        self._unanswered = 0  # new connections without a byte from the server yet
        self._waiting: deque[asyncio.Future[_Conn | None]] = deque()  # requests waiting for a connection
        self._all: set[_Conn] = set()
        self.loop = asyncio.get_running_loop()

    async def __aenter__(self) -> StreamPool:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in list(self._all):
            conn.abort(ConnectionError("client closed"))
        while self._waiting:
            if not (waiting := self._waiting.popleft()).done():
                waiting.set_exception(ConnectionError("client closed"))
        self._all.clear()
        self._idle.clear()

    def release(self, conn: _Conn) -> None:
        if conn in self._all and not self._wake(conn):
            self._idle.append(conn)

    def settle_connect(self) -> None:
        self._unanswered -= 1
        self._wake(None)

    def _wake(self, conn: _Conn | None) -> bool:
        """Hand a connection that went idle (or, with None, room under the cap) to the longest-waiting request."""
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_result(conn)
                return True
        return False

    async def _wait_for_room(self, deadline: float, timeout_s: float) -> _Conn | None:
        """An idle connection handed over, or None: room to open one."""
        fut: asyncio.Future[_Conn | None] = self.loop.create_future()
        self._waiting.append(fut)

        def expire() -> None:
            if not fut.done():
                fut.set_exception(TimeoutError(f"no connection within {timeout_s:g} s"))

        timer = self.loop.call_later(max(0.0, deadline - time.perf_counter()), expire)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed something in the same pass as cancelled: pass it on
                if (conn := fut.result()) is None:
                    self._wake(None)
                else:
                    self.release(conn)
            raise
        finally:
            timer.cancel()

    def request_bytes(self, path: str, body: bytes) -> bytes:
        if (head := self._heads.get(path)) is None:
            extra = "".join(f"{k}: {v}\r\n" for k, v in self._headers(path).items())
            head = self._heads[path] = (f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self._host_header}\r\n"
                                        f"Content-Type: application/json\r\nAccept: text/event-stream\r\n{extra}"
                                        "Content-Length: ").encode("latin-1")
        return b"%s%d\r\n\r\n%s" % (head, len(body), body)

    async def _connect(self, timeout_s: float) -> _Conn:
        self._unanswered += 1
        connect = self.loop.create_connection(lambda: _Conn(self), self.host, self.port)
        try:
            if sys.version_info >= (3, 11):  # a timer on this task; wait_for wraps the connect in another task
                async with asyncio.timeout(timeout_s):
                    _, conn = await connect
            else:
                _, conn = await asyncio.wait_for(connect, timeout_s)
        except BaseException as exc:
            self.settle_connect()
            if isinstance(exc, asyncio.TimeoutError):  # a distinct class before Python 3.11
                raise TimeoutError(f"no connection within {timeout_s:g} s") from None
            raise
        conn.unanswered = True
        if conn.closed:
            conn.answered()
        self._all.add(conn)
        return conn

    async def post_sse(self, path: str, body: bytes, on_data: DataHandler, timeout_s: float) -> Response:
        """POST ``body`` and feed the SSE payloads of a 200 response to ``on_data``, within ``timeout_s``."""
        deadline = time.perf_counter() + timeout_s
        request = self.request_bytes(path, body)
        while True:
            conn = None
            while self._idle:
                candidate = self._idle.pop()
                if not candidate.closed:
                    conn = candidate
                    break
                self._all.discard(candidate)
            if conn is None and self._unanswered >= MAX_UNANSWERED_CONNECTS:
                conn = await self._wait_for_room(deadline, timeout_s)
                if conn is None or conn.closed:  # room to connect, or a connection the server closed meanwhile
                    self._all.discard(conn)
                    continue
            if conn is None:
                conn = await self._connect(deadline - time.perf_counter())
            waiter = conn.start(request, on_data)
            timer = self.loop.call_later(max(0.0, deadline - time.perf_counter()), conn.time_out, timeout_s)
            try:
                return await waiter
            except _StaleConnection:
                self._all.discard(conn)
                continue  # nothing reached the server's handler: send again on a fresh connection
            except BaseException:
                conn.abort(ConnectionError("request abandoned"))
                self._all.discard(conn)
                raise
            finally:
                timer.cancel()
                if conn.closed:
                    self._all.discard(conn)
