"""The load client's HTTP layer against raw-socket servers that send exactly the bytes a test chooses."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable

import pytest

from hybridbench.load import event_loop, http
from hybridbench.load.client import generate_openai, generate_sglang, json_codec
from hybridbench.load.http import StreamPool

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

# Every test runs on both event loops the client supports (uvloop's transports are not asyncio's classes).
LOOPS = [pytest.param(name, marks=pytest.mark.skipif(name == "uvloop" and event_loop.default() != "uvloop",
                                                     reason="uvloop is not installed (the fast extra)"))
         for name in event_loop.EVENT_LOOPS]


def _sse(chunks: list[dict[str, object]]) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def _chunked(body: bytes, size: int) -> bytes:
    parts = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts) + b"0\r\n\r\n"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    return await reader.readexactly(length)


async def _with_server(handler: Handler, body: Callable[[str], Awaitable[object]]) -> object:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await body(f"http://127.0.0.1:{port}")
    finally:
        server.close()


STREAM = [{"text": "a", "output_ids": [7], "meta_info": {"completion_tokens": 1, "cached_tokens": 3}},
          {"text": "ab", "output_ids": [7, 8], "meta_info": {"completion_tokens": 2, "cached_tokens": 3}},
          {"text": "abc", "output_ids": [7, 8, 9],
           "meta_info": {"completion_tokens": 3, "cached_tokens": 3, "finish_reason": {"type": "length", "length": 3}}}]
ONE_TOKEN = [{**STREAM[0], "meta_info": {**STREAM[0]["meta_info"], "finish_reason": {"type": "length", "length": 1}}}]


@pytest.mark.parametrize("loop", LOOPS)
def test_a_chunked_stream_split_at_every_byte_parses_the_same_and_reuses_one_connection(
        loop: event_loop.EventLoop) -> None:
    connections = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        for split in (1, 7, 10_000):  # one request per split size, all on this keep-alive connection
            payload = json.loads(await _read_request(reader))
            assert payload["input_ids"] == [1, 2, 3] and payload["stream"] is True
            data = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + _chunked(_sse(STREAM), 5))
            for i in range(0, len(data), split):
                writer.write(data[i:i + split])
                await writer.drain()
        await reader.read()

    async def body(url: str) -> object:
        async with StreamPool(url) as pool:
            return [await generate_sglang(pool, [1, 2, 3], 3, 5.0) for _ in range(3)]

    results = event_loop.run(_with_server(handler, body), loop)
    assert len(connections) == 1
    for r in results:  # type: ignore[attr-defined]
        assert r.status == "ok", r.error
        assert (r.output_tokens, r.output_ids, r.cached_tokens, len(r.itl_ms)) == (3, [7, 8, 9], 3, 2)
        assert r.sent < r.first_token <= r.end


@pytest.mark.parametrize("loop", LOOPS)
def test_an_error_status_keeps_the_body_and_a_sized_openai_stream_counts_usage(loop: event_loop.EventLoop) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        path = (await reader.readuntil(b"\r\n")).split()[1]
        await reader.readuntil(b"\r\n\r\n")
        if path == b"/generate":
            msg = b'{"error": "prompt too long"}'
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(msg), msg))
        else:
            chunks = [{"choices": [{"text": "x", "finish_reason": None}]},
                      {"choices": [{"text": "y", "finish_reason": "length"}]},
                      {"choices": [], "usage": {"completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}}]
            sse = _sse(chunks)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(sse), sse))
        await writer.drain()
        writer.close()

    async def body(url: str) -> object:
        async with StreamPool(url) as pool:
            return (await generate_sglang(pool, [1], 4, 5.0),
                    await generate_openai(pool, [1], 2, 5.0, model="m"))

    bad, good = event_loop.run(_with_server(handler, body), loop)  # type: ignore[misc]
    assert bad.status == "error" and bad.error == 'HTTP 400: {"error": "prompt too long"}' and bad.end is None
    assert good.status == "ok" and (good.output_tokens, good.cached_tokens, len(good.itl_ms)) == (2, 4, 1)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_silent_server_times_out_and_a_closed_port_is_server_died(loop: event_loop.EventLoop) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers

    async def body(url: str) -> object:
        async with StreamPool(url) as pool:
            return await generate_sglang(pool, [1], 4, 0.3)

    slow = event_loop.run(_with_server(handler, body), loop)
    assert slow.status == "timeout" and "0.3 s" in slow.error  # type: ignore[attr-defined]

    async def refused() -> object:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        async with StreamPool(f"http://127.0.0.1:{port}") as pool:
            return await generate_sglang(pool, [1], 4, 5.0)

    dead = event_loop.run(refused(), loop)
    assert dead.status == "server_died" and dead.error.startswith("connection failed")  # type: ignore[attr-defined]


@pytest.mark.parametrize("loop", LOOPS)
def test_a_connection_dropped_mid_stream_is_server_died_and_an_idle_drop_is_retried(loop: event_loop.EventLoop) -> None:
    served = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        served.append(1)
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        if len(served) == 1:  # a whole response, then the server drops the idle keep-alive connection
            writer.write(head + _chunked(_sse(ONE_TOKEN), 64))
        else:  # half a response, then the connection dies
            writer.write(head + _chunked(_sse(ONE_TOKEN), 64)[:20])
        await writer.drain()
        writer.close()

    async def body(url: str) -> object:
        async with StreamPool(url) as pool:
            first = await generate_sglang(pool, [1], 1, 5.0)
            await asyncio.sleep(0.1)  # the server has closed the idle connection by now
            second = await generate_sglang(pool, [1], 1, 5.0)
            return first, second

    first, second = event_loop.run(_with_server(handler, body), loop)  # type: ignore[misc]
    assert first.status == "ok" and first.output_tokens == 1
    assert len(served) == 2  # the dropped idle connection was replaced, not reported as a failure
    assert second.status == "server_died" and "mid-response" in second.error


@pytest.mark.parametrize("loop", LOOPS)
def test_output_ids_come_from_the_last_list_and_a_malformed_one_is_an_error(loop: event_loop.EventLoop) -> None:
    # SGLang resends the whole output_ids list in every chunk: the client keeps the last one, converted once.
    streams = {b"good": STREAM,
               b"bad": [*STREAM[:2], {"output_ids": [7, 8, "nine"], "meta_info": STREAM[2]["meta_info"]}],
               b"odd": [STREAM[0], {"output_ids": None, "meta_info": STREAM[2]["meta_info"]}]}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        name = json.loads(await _read_request(reader))["input_ids"]
        sse = _sse(streams[bytes(name)])
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(sse), sse))
        await writer.drain()
        writer.close()

    async def body(url: str) -> object:
        async with StreamPool(url) as pool:
            return [await generate_sglang(pool, list(name), 3, 5.0) for name in streams]

    good, bad, odd = event_loop.run(_with_server(handler, body), loop)  # type: ignore[misc]
    assert (good.status, good.output_ids, good.output_tokens) == ("ok", [7, 8, 9], 3)
    assert bad.status == "error" and "nine" in bad.error and bad.output_tokens == 0
    # None is not a list, so not output ids; the [7] before it is 1 of the 3 tokens, never handed on as the answer
    assert (odd.status, odd.output_ids, odd.output_tokens) == ("ok", [], 3)


def test_bodies_and_chunks_read_the_same_with_or_without_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    payload = {"input_ids": (1, 2, 30000), "sampling_params": {"temperature": 0.0, "max_new_tokens": 4,
               "ignore_eos": True}, "stream": True, "model": "m/ü"}
    chunks = [b'{"text": "a\\ud83d", "meta_info": {"completion_tokens": 1}}',  # an escaped lone surrogate
              b'{"meta_info": {"queue_time": NaN, "e2e_latency": Infinity}}',  # json's extensions: orjson refuses
              '{"text": "\ud800"}'.encode("utf-8", "surrogatepass")]  # a raw lone surrogate: not UTF-8
    bad = [b'{"a": 1} {"b": 2}', b'{"a": ']
    codecs = [json_codec()]
    monkeypatch.setitem(sys.modules, "orjson", None)  # an import of orjson now fails: json's codec
    codecs.append(json_codec())
    (fast_dumps, fast_loads), (plain_dumps, plain_loads) = codecs
    want = {**payload, "input_ids": [1, 2, 30000]}
    assert json.loads(fast_dumps(payload)) == json.loads(plain_dumps(payload)) == want
    for chunk in chunks:  # repr: NaN != NaN
        want_chunk = repr(json.loads(chunk.decode("utf-8", "surrogatepass")))
        assert repr(fast_loads(chunk)) == repr(plain_loads(chunk)) == want_chunk
    for chunk in bad:
        for loads in (fast_loads, plain_loads):
            with pytest.raises(ValueError):
                loads(chunk)


@pytest.mark.parametrize("loop", LOOPS)
def test_new_connections_wait_for_the_server_to_answer_past_the_cap(loop: event_loop.EventLoop,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # A burst of connects must not overflow a small listen backlog: past the cap, a request waits until
    # the server answers a new connection or one goes idle.
    monkeypatch.setattr(http, "MAX_UNANSWERED_CONNECTS", 2)
    opened: list[float] = []
    answered: list[float] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened.append(time.perf_counter())
        while True:
            try:
                await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            await asyncio.sleep(0.05)
            answered.append(time.perf_counter())
            sse = _sse(ONE_TOKEN)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(sse), sse))
            await writer.drain()

    async def body(url: str) -> object:
        async with StreamPool(url) as pool:
            return await asyncio.gather(*(generate_sglang(pool, [i], 1, 5.0) for i in range(6)))

    results = event_loop.run(_with_server(handler, body), loop)
    assert [r.status for r in results] == ["ok"] * 6  # type: ignore[attr-defined]
    assert len(opened) >= 2 and all(t > answered[0] for t in opened[2:])  # a third only after an answer


@pytest.mark.parametrize("loop", LOOPS)
def test_a_request_waiting_past_the_cap_is_handed_the_next_idle_connection(loop: event_loop.EventLoop,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # With the cap at 1, requests queue behind the first connection: each answer makes room for one more
    # connection, and each finished response hands its connection to the next request in line.
    monkeypatch.setattr(http, "MAX_UNANSWERED_CONNECTS", 1)
    connections: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        while True:
            try:
                await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            await asyncio.sleep(0.01)
            sse = _sse(STREAM)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(sse), sse))
            await writer.drain()

    async def body(url: str) -> object:
        async with StreamPool(url) as pool:
            first = asyncio.ensure_future(generate_sglang(pool, [0], 3, 5.0))
            await asyncio.sleep(0)  # the first request is connecting: the cap is reached
            rest = await asyncio.gather(*(generate_sglang(pool, [i], 3, 5.0) for i in range(1, 5)))
            return [await first, *rest]

    results = event_loop.run(_with_server(handler, body), loop)
    assert [(r.status, r.output_ids) for r in results] == [("ok", [7, 8, 9])] * 5  # type: ignore[attr-defined]
    assert 1 < len(connections) < 5  # not one connection per request


@pytest.mark.parametrize("loop", LOOPS)
def test_a_stream_that_ends_before_its_finish_or_short_of_the_tokens_asked_is_an_error(
        loop: event_loop.EventLoop) -> None:
    # A 200 that ends early (no finish reason, or fewer tokens than asked with ignore_eos) is no answer: counted as
    # a success it made a build that stops decoding look faster (the run's verdict said pass).
    short = {**STREAM[1], "meta_info": {**STREAM[1]["meta_info"], "finish_reason": {"type": "length", "length": 2}}}
    streams = {b"whole": (_sse(STREAM), "/generate"), b"no finish": (_sse(STREAM[:2]), "/generate"),
               b"empty": (b"data: [DONE]\n\n", "/generate"), b"short": (_sse([STREAM[0], short]), "/generate"),
               b"closed": (_sse(STREAM)[:-len(b"data: [DONE]\n\n")], "/generate"),
               b"oa whole": (_sse([{"choices": [{"text": "x", "finish_reason": None}]},
                                   {"choices": [{"text": "y", "finish_reason": "length"}]},
                                   {"choices": [], "usage": {"completion_tokens": 3}}]), "/v1/completions"),
               b"oa no finish": (_sse([{"choices": [{"text": "x", "finish_reason": None}]},
                                       {"choices": [], "usage": {"completion_tokens": 3}}]), "/v1/completions"),
               b"oa short": (_sse([{"choices": [{"text": "x", "finish_reason": "length"}]},
                                   {"choices": [], "usage": {"completion_tokens": 1}}]), "/v1/completions"),
               b"oa no usage": (_sse([{"choices": [{"text": "xyz", "finish_reason": "length"}]}]), "/v1/completions")}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = json.loads(await _read_request(reader))
        sse, _ = streams[bytes(body.get("input_ids") or body["prompt"])]
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(sse), sse))
        await writer.drain()
        writer.close()

    async def body(url: str) -> object:
        async with StreamPool(url) as pool:
            return {name.decode(): await (generate_sglang(pool, list(name), 3, 5.0) if path == "/generate" else
                                          generate_openai(pool, list(name), 3, 5.0, model="m"))
                    for name, (_, path) in streams.items()}

    got = event_loop.run(_with_server(handler, body), loop)
    status = {name: (r.status, r.error) for name, r in got.items()}  # type: ignore[attr-defined]
    assert status["whole"] == status["closed"] == status["oa whole"] == status["oa no usage"] == ("ok", "")
    assert status["no finish"] == ("error", "the stream ended without a finish reason (2 of 3 tokens)")
    assert status["empty"] == ("error", "the stream ended without a finish reason (0 of 3 tokens)")
    assert status["short"] == ("error", "cut short: 2 of the 3 tokens asked for (ignore_eos)")
    assert status["oa no finish"] == ("error", "the stream ended without a finish reason (3 of 3 tokens)")
    assert status["oa short"] == ("error", "cut short: 1 of the 3 tokens asked for (ignore_eos)")
    assert got["oa no usage"].output_tokens == 1  # type: ignore[index]  # counted by chunk: no count to judge


@pytest.mark.parametrize("loop", LOOPS)
def test_a_stop_signal_raised_while_a_stream_is_read_stops_the_run(loop: event_loop.EventLoop,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The harness's SIGINT handler raises Interrupted wherever the process is. Raised inside data_received, uvloop
    # reported it as the transport's fatal error and closed the connection: the request was recorded server_died,
    # the run went on (a second Ctrl-C only said "already stopping") and ended in a false survival FAIL.
    from hybridbench.errors import Interrupted
    from hybridbench.load import client

    async def handler_reads(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        sse = _sse(STREAM)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(sse), sse))
        await writer.drain()
        await reader.read()

    seen = []
    cast_chunk = client._object

    def interrupted_on_the_second_chunk(data: bytes) -> dict[str, object]:
        seen.append(data)
        if len(seen) == 2:
            raise Interrupted("SIGINT")
        return cast_chunk(data)

    monkeypatch.setattr(client, "_object", interrupted_on_the_second_chunk)

    async def body(url: str) -> object:
        async with StreamPool(url) as pool:
            return await generate_sglang(pool, [1, 2, 3], 3, 5.0)

    with pytest.raises(Interrupted):
        event_loop.run(_with_server(handler_reads, body), loop)
