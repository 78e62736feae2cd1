"""The values of SGLang's timing keys in the reference server's /generate answers (reference_impl/server/timing.py):
measured, in the order the moments happen, consistent with each other and with the client's own clock, and
computed by each version's formula. Which keys each answer and chunk carries is checked against the recordings in
tests/hybridbench/test_sglang_recorded.py."""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from server_harness import Server, running_server

from reference_impl.server.timing import FORCE_STREAM_INTERVAL, RequestTimes, finish_meta, scheduler_meta

VERSIONS = ("0.5.16", "0.5.23")
PROMPT = list(range(3, 203))
EPS = 1e-5  # a wall-clock stamp near 1.8e9 s is exact to ~2.4e-7 s


@pytest.fixture(scope="module", params=VERSIONS)
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Server, str]]:
    # one request at a time: a second one waits in the queue for the first
    with running_server("--sglang-api-version", request.param, "--max-running-requests", "1",
                        "--log-level", "warning") as s:
        yield s, request.param


def body(max_new: int, prompt: list[int] = PROMPT) -> dict[str, Any]:
    return {"input_ids": prompt, "sampling_params": {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True}}


def _ordered(*stamps: float) -> None:
    assert all(a <= b + EPS for a, b in itertools.pairwise(stamps)), stamps


def test_a_plain_answer_stamps_its_moments_in_order(served: tuple[Server, str]) -> None:
    server, version = served
    n = 8
    before = time.time()
    meta = server.generate(body(n, [9, *PROMPT]))["meta_info"]
    after = time.time()
    received, finished = meta["request_received_ts"], meta["request_finished_ts"]
    # the client's clock brackets the server's: real wall-clock moments, not made-up numbers
    _ordered(before, received, meta["api_server_dispatch_finish_ts"], finished, meta["response_sent_to_client_ts"],
             after)
    assert 0 < meta["e2e_latency"] <= after - before
    assert meta["e2e_latency"] == pytest.approx(finished - received, abs=EPS)
    assert meta["dp_rank"] is None
    if version == "0.5.16":
        assert meta["queue_time"] == 0.0
        # 0.5.16's first token is the first output the API server got: a non-streamed request's last one, so its
        # "decode" lasts two clock reads (recorded: ~1e6 tokens/s).
        assert meta["decode_throughput"] * meta["e2e_latency"] > 4 * (n - 1)
        return
    _ordered(meta["api_server_dispatch_finish_ts"], meta["forward_entry_time"], meta["prefill_finished_time"],
             finished)
    # 0.5.23 takes a non-streamed request's first token from the scheduler's prefill_finished_time
    assert meta["first_token_latency"] == pytest.approx(meta["prefill_finished_time"] - received, abs=EPS)
    decode = finished - meta["prefill_finished_time"]
    assert meta["decode_throughput"] == pytest.approx((n - 1) / decode, rel=1e-3)
    assert 0 <= meta["queue_time"] <= meta["forward_entry_time"] - received + EPS
    assert meta["storage_prefetch_wait"] == meta["storage_staging_wait"] == 0.0
    assert meta["weight_versions"] == [{"version": "default", "start": 0, "end": n}]


def test_a_stream_stamps_its_first_chunk_and_its_end(served: tuple[Server, str]) -> None:
    server, version = served
    n = 6
    before = time.time()
    chunks = [c["meta_info"] for c in server.stream("/generate", body(n, [8, *PROMPT]))[:-1]]
    after = time.time()
    first, last = chunks[0], chunks[-1]
    sent = first["response_sent_to_client_ts"]
    assert last["response_sent_to_client_ts"] == sent  # the end repeats the first byte's stamp
    assert all("response_sent_to_client_ts" not in c for c in chunks[1:-1])
    received, finished = last["request_received_ts"], last["request_finished_ts"]
    _ordered(before, received, last["api_server_dispatch_finish_ts"], sent, finished, after)
    assert last["e2e_latency"] == pytest.approx(finished - received, abs=EPS)
    if version == "0.5.16":
        # first token: the first output's arrival, after dispatch and before the first chunk went out
        assert (n - 1) / (finished - last["api_server_dispatch_finish_ts"]) <= last["decode_throughput"] \
            <= (n - 1) / (finished - sent) * (1 + 1e-3)
        assert all(c["queue_time"] == 0.0 for c in chunks)
        return
    # the scheduler's stamps are the same on every chunk; the first token is the stream's first output's arrival
    assert len({(c["forward_entry_time"], c["prefill_finished_time"], c["queue_time"]) for c in chunks}) == 1
    first_token = received + last["first_token_latency"]
    _ordered(last["forward_entry_time"], last["prefill_finished_time"], first_token, sent)
    assert last["decode_throughput"] == pytest.approx((n - 1) / (finished - first_token), rel=1e-3)
    assert last["weight_versions"] == [{"version": "default", "start": 0, "end": n}]


def test_one_token_has_no_decode_throughput(served: tuple[Server, str]) -> None:
    """SGLang reports a decode rate only past the first token (req_time_stats.py 0.5.16:492-494, 0.5.23:492-502);
    a stream whose one chunk is its end carries the end's keys and then the first byte's stamp."""
    server, _ = served
    plain = server.generate(body(1, [7, *PROMPT]))["meta_info"]
    chunks = server.stream("/generate", body(1, [6, *PROMPT]))
    assert len(chunks) == 2 and "decode_throughput" not in plain
    assert list(chunks[0]["meta_info"]) == list(plain)
    assert list(plain)[-1] == "response_sent_to_client_ts"


def _stream_first_chunk(server: Server, request: dict[str, Any]) -> tuple[http.client.HTTPResponse, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/generate", json.dumps({**request, "stream": True}))
    resp = conn.getresponse()
    line = b""
    while not line.startswith(b"data: "):
        line = resp.readline()
    return resp, line


def test_a_request_queued_behind_a_long_one_reports_its_wait(served: tuple[Server, str]) -> None:
    """With one request running at a time, a short request sent once a long one streams its first token waits
    in the queue until the long one ends: 0.5.23 reports that wait as queue_time; 0.5.16 reports 0.0 for every
    request (its scheduler's stamps are lost on the way to the API server, timing.py), yet its e2e shows it."""
    server, version = served
    resp, _ = _stream_first_chunk(server, body(200, [5, *PROMPT]))  # running now
    rest: list[bytes] = []
    reader = threading.Thread(target=lambda: rest.append(resp.read()))
    reader.start()
    short = server.generate(body(2, [4, *PROMPT]))["meta_info"]
    reader.join(60)
    long = json.loads([b for b in rest[0].decode().split("\n\n") if b.startswith("data: {")][-1][6:])["meta_info"]
    assert long["completion_tokens"] == 200
    waited = long["request_finished_ts"] - short["request_received_ts"]
    assert waited > 0.05, "the long request ended too soon to make the short one wait"
    assert short["e2e_latency"] > 0.8 * waited
    if version == "0.5.16":
        assert short["queue_time"] == long["queue_time"] == 0.0 and "forward_entry_time" not in short
        return
    # the short one entered the queue after its receipt and its first forward followed the long one's last
    assert short["queue_time"] <= short["forward_entry_time"] - short["request_received_ts"] + EPS
    assert short["queue_time"] > 0.8 * waited
    assert short["forward_entry_time"] > long["prefill_finished_time"]
    assert long["queue_time"] < 0.1 * short["queue_time"]  # served at once


# ------------------------------------------------------------------------------------------------ in process
def _times(version: str, *, stream: bool) -> RequestTimes:
    return RequestTimes(version, stream, received=100.0, wall_offset=1.7e9)


def test_queue_time_sums_every_stay_in_the_queue() -> None:
    """A retracted request re-enters the queue; 0.5.23's queue_time adds the second wait, forward_entry_time
    keeps the first forward (req_time_stats.py 0.5.23:802-840)."""
    t = _times("0.5.23", stream=False)
    t.enter_queue(101.0)
    t.enter_forward(103.0)
    t.enter_forward(103.5)  # a later chunk of the same prefill
    t.enter_queue(110.0)  # retracted
    t.enter_forward(111.5)
    assert t.queue_s == pytest.approx(3.5)
    assert scheduler_meta(t)["forward_entry_time"] == 1.7e9 + 103.0
    assert scheduler_meta(t)["queue_time"] == pytest.approx(3.5)
    assert scheduler_meta(_times("0.5.16", stream=False)) == {"queue_time": 0.0}


def test_a_non_streamed_request_is_first_heard_of_at_its_end_or_every_50_tokens() -> None:
    t = _times("0.5.16", stream=False)
    t.output_arrived(FORCE_STREAM_INTERVAL - 1, finished=False)
    assert t.first_token == 0.0
    t.output_arrived(FORCE_STREAM_INTERVAL, finished=False)
    assert t.first_token > 0.0 and t.finished == 0.0
    s = _times("0.5.16", stream=True)
    s.output_arrived(1, finished=False)
    assert s.first_token > 0.0


@pytest.mark.parametrize("version", VERSIONS)
def test_the_first_token_of_a_request_answered_at_once(version: str) -> None:
    now = time.perf_counter()
    t = RequestTimes(version, False, received=now - 1.0, wall_offset=0.0)
    t.prefill_finished = now - 0.5
    t.output_arrived(4, finished=True)
    meta = finish_meta(t, 4, metrics=True)
    if version == "0.5.23":  # the scheduler's prefill end; the end is the arrival
        assert t.first_token == now - 0.5 and meta["first_token_latency"] == pytest.approx(0.5)
        assert meta["decode_throughput"] == pytest.approx(3 / (t.finished - t.first_token))
    else:  # the arrival, and the end a clock read later
        assert t.first_token >= now and t.finished >= t.first_token and "first_token_latency" not in meta
    s = RequestTimes(version, True, received=now - 1.0, wall_offset=0.0)
    s.output_arrived(1, finished=True)  # a stream whose first output is its end: no decode interval on 0.5.23
    decoded = version == "0.5.16" and s.finished > s.first_token
    assert ("decode_throughput" in finish_meta(s, 2, metrics=True)) == decoded


# the keys SGLang sends only with --enable-metrics (tokenizer_manager.py 0.5.16:1934-1937 and 2148-2162,
# 0.5.23:2515-2518 and 2757-2770); e2e_latency, dp_rank, weight_versions and the first byte's stamp always
METRICS_ONLY = {"queue_time", "storage_prefetch_wait", "storage_staging_wait", "forward_entry_time",
                "prefill_finished_time", "request_received_ts", "first_token_latency", "api_server_dispatch_finish_ts",
                "request_finished_ts", "decode_throughput"}


def _stream_metas(server: Server) -> list[dict[str, Any]]:
    return [e["meta_info"] for e in server.stream("/generate", body(16)) if e != "[DONE]"]


def _metered_keys(metered: dict[str, Any], extra: frozenset[str] = frozenset()) -> list[str]:
    return [k for k in metered if k not in METRICS_ONLY | extra]


@pytest.mark.parametrize("version", VERSIONS)
def test_without_enable_metrics_the_metrics_keys_are_absent(version: str) -> None:
    with running_server("--sglang-api-version", version, "--log-level", "warning", metrics=False) as plain, \
            running_server("--sglang-api-version", version, "--log-level", "warning") as metered:
        answers = plain.generate(body(4))["meta_info"], metered.generate(body(4))["meta_info"]
        streams = _stream_metas(plain), _stream_metas(metered)
    g, f = answers
    assert METRICS_ONLY & set(f) and list(g) == _metered_keys(f)
    assert {"e2e_latency", "dp_rank", "response_sent_to_client_ts"} <= set(g)
    # A slow reader gets its tokens coalesced into fewer chunks (SGLang's tokenizer manager keeps the latest
    # output only), so chunks are paired by what they are, not by position: a loaded run compared a finished
    # chunk with an unfinished one.
    g_chunks, f_chunks = streams
    sent = frozenset({"response_sent_to_client_ts"})  # where it goes depends on how the stream was cut
    assert [k for k in g_chunks[-1] if k not in sent] == _metered_keys(f_chunks[-1], sent)
    if len(g_chunks) > 1 and len(f_chunks) > 1:
        assert list(g_chunks[0]) == _metered_keys(f_chunks[0])
        # the API server repeats the first byte's stamp on a stream's last chunk with --enable-metrics only
        assert "response_sent_to_client_ts" not in g_chunks[-1]
        assert list(g_chunks[-1]) == _metered_keys(f_chunks[-1], frozenset({"response_sent_to_client_ts"}))
        assert "response_sent_to_client_ts" in f_chunks[-1]
    elif len(g_chunks) == len(f_chunks) == 1:
        assert list(g_chunks[0]) == _metered_keys(f_chunks[0])


def test_without_metrics_only_e2e_latency() -> None:
    """SGLang adds its stamps only with --enable-metrics (tokenizer_manager.py 0.5.16:2148, 0.5.23:2757)."""
    t = _times("0.5.23", stream=False)
    t.output_arrived(3, finished=True)
    assert list(finish_meta(t, 3, metrics=False)) == ["e2e_latency"]
