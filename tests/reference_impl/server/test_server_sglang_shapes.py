"""SGLang's answer shapes that the recordings do not show, as SGLang's source gives them (the file:line of each
is in reference_impl/server/errors.py): refusals inside a stream, bodies that do not parse, the OpenAI
endpoints' ErrorResponse, the version-dependent order of checks, and batched /generate (a list of prompts).
The recorded cases are in tests/hybridbench/test_sglang_recorded.py."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from server_harness import ERROR_RESPONSE_KEYS, Server, running_server

PROMPTS = [[5, 6, 7, 8, 9], [40, 41, 42]]
UNKNOWN = "unknown field `bogus`, expected one of `max_new_tokens`, `stop`, `stop_token_ids`, `stop_regex`"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:  # --sglang-api-version 0.5.23, the default
    with running_server("--arm", "lru", "--max-total-tokens", "20000", "--log-level", "warning") as s:
        yield s


@pytest.fixture(scope="module")
def old() -> Iterator[Server]:
    with running_server("--arm", "lru", "--sglang-api-version", "0.5.16", "--log-level", "warning") as s:
        yield s


def greedy(max_new: int = 4) -> dict[str, Any]:
    return {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True}


# ------------------------------------------------------------------------------------------------ refusals
def test_a_streamed_refusal_is_an_event_after_200(server: Server) -> None:
    """SGLang validates inside the stream (tokenizer manager), after its 200: an error event, then [DONE]."""
    events = server.stream("/generate", {"input_ids": [], "sampling_params": greedy()})
    assert events == [{"error": {"message": "input_ids cannot be empty.", "type": "invalid_request_error",
                                 "code": 400, "retryable": False}}, "[DONE]"]


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/v1/chat/completions"])
def test_a_body_that_does_not_parse_is_fastapis_validation_error(server: Server, path: str) -> None:
    status, raw = server.request("POST", path, raw=b"{not json")
    body = json.loads(raw)
    assert status == 400 and set(body) == ERROR_RESPONSE_KEYS, body
    assert (body["object"], body["type"], body["param"], body["code"]) == ("error", "Bad Request", None, 400)


def test_openai_refusals_are_error_responses(server: Server) -> None:
    status, raw = server.request("POST", "/v1/completions", {"prompt": [], "max_tokens": 2})
    body = json.loads(raw)
    assert status == 400 and set(body) == ERROR_RESPONSE_KEYS, body
    assert (body["type"], body["code"], body["param"]) == ("BadRequestError", 400, None)


def test_the_order_of_checks_follows_the_version(server: Server, old: Server) -> None:
    """0.5.23's contract gate runs before the tokenizer manager; 0.5.16 has none, and its unknown-field
    TypeError comes after the empty-input check."""
    bad = {"input_ids": [], "sampling_params": {"bogus": 1}}
    status, raw = server.request("POST", "/generate", bad)
    assert status == 400 and json.loads(raw)["error"].startswith(UNKNOWN)
    status, raw = old.request("POST", "/generate", bad)
    assert (status, json.loads(raw)) == (400, {"error": {"message": "input_ids cannot be empty."}})
    # a value of the wrong JSON type: the gate's text (proven against the real gate: tests/sglang_oracle)
    status, raw = server.request("POST", "/generate", {"input_ids": [1], "sampling_params": {"temperature": "hot"}})
    assert (status, json.loads(raw)) == (400, {"error": 'invalid type: string "hot", expected f64'})
    # 0.5.23 refuses before the stream starts, whatever `stream` says
    status, raw = server.request("POST", "/generate",
                                 {"input_ids": [1], "stream": True, "sampling_params": {"bogus": 1}})
    assert status == 400 and json.loads(raw)["error"].startswith(UNKNOWN)


def test_0_5_16_drops_a_stream_whose_sampling_params_it_cannot_build(old: Server) -> None:
    """The TypeError escapes after the 200 headers: no event, no [DONE], the connection closed."""
    body = json.dumps({"input_ids": [1, 2], "stream": True, "sampling_params": {"bogus": 1}}).encode()
    with socket.create_connection(("127.0.0.1", old.port), timeout=30) as sock:
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        got = b""
        while chunk := sock.recv(4096):
            got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head, got
    assert b"data:" not in rest
    assert old.request("GET", "/health")[0] == 200  # only that connection went


# ------------------------------------------------------------------------------------------------ batches
def _single(server: Server, ids: list[int], sampling: dict[str, Any]) -> list[int]:
    out: list[int] = server.generate({"input_ids": ids, "sampling_params": sampling})["output_ids"]
    return out


def test_a_batch_answers_a_list_in_prompt_order(server: Server) -> None:
    singles = [_single(server, p, greedy()) for p in PROMPTS]
    status, raw = server.request("POST", "/generate", {"input_ids": PROMPTS, "sampling_params": greedy()})
    got = json.loads(raw)
    assert status == 200 and isinstance(got, list) and len(got) == 2, got
    assert [g["output_ids"] for g in got] == singles
    assert [g["meta_info"]["prompt_tokens"] for g in got] == [len(p) for p in PROMPTS]
    assert len({g["meta_info"]["id"] for g in got}) == 2
    # per-prompt sampling params, and text prompts
    got = json.loads(server.request("POST", "/generate", {"input_ids": PROMPTS,
                                                          "sampling_params": [greedy(1), greedy(3)]})[1])
    assert [g["meta_info"]["completion_tokens"] for g in got] == [1, 3]
    got = json.loads(server.request("POST", "/generate", {"text": ["ab", "xyz"], "sampling_params": greedy(2)})[1])
    assert [g["meta_info"]["prompt_tokens"] for g in got] == [2, 3]


def test_a_batch_streams_chunks_tagged_with_their_prompts_index(server: Server) -> None:
    singles = [_single(server, p, greedy(6)) for p in PROMPTS]
    events = server.stream("/generate", {"input_ids": PROMPTS, "sampling_params": greedy(6)})
    assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
    final: dict[int, list[int]] = {}
    for e in events[:-1]:
        assert e["index"] not in final, "a chunk after its prompt's last"
        if e["meta_info"]["finish_reason"] is not None:
            final[e["index"]] = e["output_ids"]
    assert final == {0: singles[0], 1: singles[1]}
    # a single prompt's chunks carry no index, as in SGLang
    assert all("index" not in e for e in server.stream("/generate", {"input_ids": PROMPTS[0]})[:-1])


def test_a_batch_client_that_goes_away_frees_every_prompts_slots(server: Server) -> None:
    body = json.dumps({"input_ids": [[7] * 50, [8] * 50], "stream": True,
                       "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True}}).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        got = b""
        while got.count(b"data: ") < 2:
            got += sock.recv(4096)
        deadline = time.monotonic() + 10
        while server.metric("sglang:num_running_reqs") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.metric("sglang:num_running_reqs") == 2
    deadline = time.monotonic() + 10
    while server.metric("sglang:num_running_reqs") > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.metric("sglang:num_running_reqs") == 0
    assert server.request("POST", "/flush_cache")[0] == 200  # idle again: nothing holds a slot


def _completion(server: Server, prompt: Any, **extra: Any) -> dict[str, Any]:
    status, raw = server.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 4, "temperature": 0,
                                                            "ignore_eos": True, **extra})
    assert status == 200, raw
    out: dict[str, Any] = json.loads(raw)
    return out


def test_a_completion_batch_answers_a_choice_per_prompt(server: Server) -> None:
    singles = [_completion(server, p) for p in PROMPTS]
    both = _completion(server, PROMPTS)
    assert [c["index"] for c in both["choices"]] == [0, 1]
    assert [c["text"] for c in both["choices"]] == [s["choices"][0]["text"] for s in singles]
    assert both["usage"]["prompt_tokens"] == sum(len(p) for p in PROMPTS)
    usage = both["usage"]
    assert usage["completion_tokens"] == 8 and usage["total_tokens"] == usage["prompt_tokens"] + 8
    # streamed: each chunk's one choice names its prompt; the summed usage alone after both have finished
    events = server.stream("/v1/completions", {"prompt": PROMPTS, "max_tokens": 4, "temperature": 0,
                                               "ignore_eos": True, "stream_options": {"include_usage": True}})
    streamed_usage = {k: v for k, v in usage.items() if k != "completion_tokens_details"}  # not in a stream
    assert events[-1] == "[DONE]" and events[-2]["choices"] == [] and events[-2]["usage"] == streamed_usage
    text = {0: "", 1: ""}
    for e in events[:-2]:
        (choice,) = e["choices"]
        text[choice["index"]] += choice["text"]
    assert [text[0], text[1]] == [c["text"] for c in both["choices"]]
