"""The reference server as a separate process over real HTTP: endpoints, cache accounting, safety."""

from __future__ import annotations

import json
import math
import random
import re
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from server_harness import Server, error_message, running_server


def toks(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(300, 4096) for _ in range(n)]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--arm", "branching", "--max-total-tokens", "20000") as s:
        yield s


def test_info_endpoints(server: Server) -> None:
    assert server.request("GET", "/health")[0] == 200
    assert server.request("GET", "/health_generate")[0] == 200
    info = server.get_json("/server_info")
    assert info["disable_radix_cache"] is False and info["mamba_radix_cache_strategy"] == "extra_buffer"
    assert info["max_total_num_tokens"] == 20000 and info["page_size"] == 1
    # SGLang's ServerArgs field names, and the effective running-request cap at the top level too.
    assert info["random_seed"] == 0 and info["enable_hierarchical_cache"] is False
    assert info["radix_eviction_policy"] == "lru"
    assert not {"seed", "hicache", "strategy", "policy"} & set(info)
    assert info["max_running_requests"] == info["internal_states"][0]["max_running_requests"] == 256 // 5
    assert server.get_json("/model_info")["is_generation"] is True
    models = server.get_json("/v1/models")
    assert models["data"][0]["id"] == "reference-tiny-hybrid"


def test_server_info_with_the_radix_cache_disabled() -> None:
    """SGLang resolves the mamba strategy only with the radix cache on; off, the flag is reported as given."""
    with running_server("--disable-radix-cache", "--log-level", "warning") as s:
        info = s.get_json("/server_info")
    assert info["disable_radix_cache"] is True and info["mamba_radix_cache_strategy"] == "auto"
    assert info["max_running_requests"] == 256  # one state slot per request without the cache


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$")


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample line; each must have labels (SGLang labels them all)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"sample line without labels: {line!r}"
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def test_metrics_label_every_sample_and_are_sane(server: Server) -> None:
    server.generate({"input_ids": [3] * 10, "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}})
    status, body = server.request("GET", "/metrics")
    assert status == 200
    parsed = samples(body.decode())
    assert all(labels.get("model_name") == "reference-tiny-hybrid" for _, labels, _ in parsed), parsed
    by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, labels, value in parsed:
        by_name.setdefault(name, []).append((labels, value))
    ttft = "sglang:time_to_first_token_seconds"
    buckets = by_name[ttft + "_bucket"]
    counts = [v for _, v in buckets]
    assert counts == sorted(counts) and buckets[-1][0]["le"] == "+Inf"  # cumulative, ending at +Inf
    (count,), (total,) = [v for _, v in by_name[ttft + "_count"]], [v for _, v in by_name[ttft + "_sum"]]
    assert counts[-1] == count >= 1 and total > 0
    ((_, usage),) = by_name["sglang:token_usage"]
    ((_, queued),) = by_name["sglang:num_queue_reqs"]
    assert 0.0 <= usage <= 1.0 and queued >= 0 and queued == int(queued)


def test_branching_cached_tokens_0_0_256(server: Server) -> None:
    """SGLang's PrefixCacheBranchingMixin: a 257-token prefix, three suffixes, sent one after another."""
    assert server.request("POST", "/flush_cache")[0] == 200
    rng = random.Random(0)
    prefix = toks(rng, 257)
    cached = []
    for _ in range(3):
        out = server.generate({"input_ids": prefix + toks(rng, 256), "sampling_params": {"max_new_tokens": 1}})
        cached.append(out["meta_info"]["cached_tokens"])
    assert cached == [0, 0, 256]
    assert server.metric("sglang:cached_tokens_total") >= 256
    assert server.metric("sglang:prompt_tokens_total") >= 3 * 513


def test_stream_is_cumulative_and_ends_with_done(server: Server) -> None:
    events = server.stream("/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    # One chunk per token for a reader that keeps up; a lagging one gets updates coalesced (stream.Latest),
    # so the counts only have to climb to 6 and each chunk's text extend the one before.
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(set(counts)) and counts[-1] == 6 and counts[0] >= 1
    assert all(chunks[i + 1]["text"].startswith(chunks[i]["text"]) for i in range(len(chunks) - 1))
    assert [c["output_ids"] for c in chunks] == [chunks[-1]["output_ids"][:n] for n in counts]
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 6} and "e2e_latency" in last
    assert last["prompt_tokens"] == 5 and last["cached_tokens"] == 0


def test_logprobs_of_a_cache_hit_equal_a_cold_prefill(server: Server) -> None:
    """The KL method of SGLang's tests: output logprobs after a hit vs input logprobs of a cold replay."""
    rng = random.Random(1)
    prefix = toks(rng, 300)
    server.generate({"input_ids": prefix + toks(rng, 10), "sampling_params": {"max_new_tokens": 1}})
    prompt = prefix + toks(rng, 20)
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 8, "temperature": 0}, "return_logprob": True}
    hit = server.generate(body)  # the first request tracked the branch point at 256: this one hits it
    assert hit["meta_info"]["cached_tokens"] == 256
    out_lp = [e[0] for e in hit["meta_info"]["output_token_logprobs"]]
    assert server.request("POST", "/flush_cache")[0] == 200
    replay = server.generate({"input_ids": prompt + hit["output_ids"], "sampling_params": {"max_new_tokens": 0},
                              "return_logprob": True, "logprob_start_len": 0})
    meta = replay["meta_info"]
    assert meta["cached_tokens"] == 0 and meta["completion_tokens"] == 0
    assert meta["input_token_logprobs"][0][0] is None
    in_lp = [e[0] for e in meta["input_token_logprobs"][-8:]]
    kl = sum(math.exp(a - b) - 1 - (a - b) for a, b in zip(in_lp, out_lp, strict=True)) / 8
    assert max(abs(a - b) for a, b in zip(in_lp, out_lp, strict=True)) < 1e-3
    assert kl < 1e-6


def test_v1_completions(server: Server) -> None:
    rng = random.Random(2)
    prompt = toks(rng, 40)
    status, body = server.request("POST", "/v1/completions", {"model": "x", "prompt": prompt, "max_tokens": 3})
    assert status == 200
    out = json.loads(body)
    assert out["usage"]["completion_tokens"] == 3 and out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    events = server.stream("/v1/completions", {"prompt": prompt, "max_tokens": 4, "ignore_eos": True,
                                               "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    # SGLang's order: the last text chunk with the reason, then the usage alone (no choices)
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 4
    assert events[-3]["choices"][0]["finish_reason"] == "length" and events[-3]["usage"] is None
    assert "".join(e["choices"][0]["text"] for e in events[:-2])
    # without include_usage, no usage chunk
    events = server.stream("/v1/completions", {"prompt": prompt, "max_tokens": 4, "ignore_eos": True})
    assert all(e["usage"] is None and len(e["choices"]) == 1 for e in events[:-1])


def test_v1_chat_completions_templates_messages_and_shares_their_prefix(server: Server) -> None:
    """evalscope's OpenAI client speaks /v1/chat/completions: messages become one templated byte prompt,
    so two chats that share their first message share a cacheable token prefix."""
    shots = "Q: 1+1?\nA: 2\n" * 30  # a few-shot preamble of ~400 bytes, as gsm8k's 4-shot prompt has
    first = {"model": "x", "messages": [{"role": "system", "content": shots}, {"role": "user", "content": "Q: 2+3?"}],
             "max_tokens": 5, "temperature": 0, "n": None, "stream_options": None}
    status, raw = server.request("POST", "/v1/chat/completions", first)
    assert status == 200, raw
    out = json.loads(raw)
    prompt_len = len(f"<|system|>\n{shots}\n<|user|>\nQ: 2+3?\n<|assistant|>\n".encode())
    assert out["object"] == "chat.completion" and out["usage"]["prompt_tokens"] == prompt_len
    message = out["choices"][0]["message"]
    assert message["role"] == "assistant" and out["usage"]["completion_tokens"] == 5
    second = {**first, "messages": [first["messages"][0], {"role": "user", "content": "Q: 4+4?"}], "stream": True,
              "stream_options": {"include_usage": True}}
    events = server.stream("/v1/chat/completions", second)
    assert events[-1] == "[DONE]"
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    last = events[-2]
    assert last["choices"][0]["finish_reason"] == "length"
    # the shared system message was reused from the first chat's prefill (branching arm: a branch-point state)
    shared = len(f"<|system|>\n{shots}\n<|user|>\nQ: ".encode())
    assert shared // 2 < last["usage"]["prompt_tokens_details"]["cached_tokens"] <= shared
    # greedy and deterministic: the same chat again, streamed, gives the non-streamed answer
    again = server.stream("/v1/chat/completions", {**first, "stream": True})
    assert "".join(e["choices"][0]["delta"]["content"] for e in again[:-1]) == message["content"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"messages": []}, "messages must be a non-empty list"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role must be one of"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "content must be a string"),
        ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "unknown field(s) in a message"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n=2 is not supported"),
        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 21}, "top_logprobs must be in [0, 20]"),
        ({"messages": [{"role": "user", "content": "x"}], "logprobs": 1}, "logprobs must be true or false"),
        ({"prompt": "x"}, "unknown field(s) in the request: prompt"),
    ],
)
def test_v1_chat_completions_refuses_what_it_cannot_serve(server: Server, body: dict[str, object],
                                                          needle: str) -> None:
    status, raw = server.request("POST", "/v1/chat/completions", body)
    assert status == 400 and needle in raw.decode(), raw


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"{not json", "malformed JSON"),
        (b"[1, 2]", "JSON object"),
        (json.dumps({"input_ids": [1], "bogus": 1}).encode(), "unknown field"),
        (json.dumps({"input_ids": [1, 99999]}).encode(), "outside the vocabulary"),
        (json.dumps({"input_ids": [-1]}).encode(), "outside the vocabulary"),
        (json.dumps({"input_ids": [5] * 20000}).encode(), "context length"),
        (json.dumps({"input_ids": [5], "sampling_params": {"max_new_tokens": -1}}).encode(), "max_new_tokens"),
        (json.dumps({"input_ids": [5], "sampling_params": {"temperature": "hot"}}).encode(), "expected f64"),
        (json.dumps({"text": "a", "input_ids": [1]}).encode(), "exactly one"),
    ],
)
def test_bad_input_is_a_400_with_a_message(server: Server, raw: bytes, needle: str) -> None:
    status, body = server.request("POST", "/generate", raw=raw)
    assert status == 400
    assert needle in error_message("/generate", json.loads(body))


def test_body_size_limit(server: Server) -> None:
    status, body = server.request("POST", "/generate", raw=b'{"text": "' + b"a" * (9 << 20) + b'"}')
    assert status == 400 and b"larger than" in body
    assert server.request("GET", "/health")[0] == 200


def test_client_disconnect_mid_stream_frees_its_slots(server: Server) -> None:
    body = json.dumps({"input_ids": [7] * 50, "stream": True,
                       "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True}}).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        got = b""
        while b"data: " not in got:
            got += sock.recv(4096)
        deadline = time.monotonic() + 10
        while server.metric("sglang:num_running_reqs") < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.metric("sglang:num_running_reqs") == 1
    deadline = time.monotonic() + 10
    while server.metric("sglang:num_running_reqs") > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.metric("sglang:num_running_reqs") == 0
    assert server.metric("sglang:mamba_usage") == 0.0 and server.metric("sglang:full_token_usage") == 0.0
    assert server.request("POST", "/flush_cache")[0] == 200  # idle again: nothing holds a slot


def test_concurrent_clients_interleave(server: Server) -> None:
    lasts: dict[int, float] = {}

    def client(i: int) -> None:
        events = server.stream("/generate", {"input_ids": [11 + i] * 30,
                                             "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}})
        assert events[-2]["meta_info"]["completion_tokens"] == 40
        lasts[i] = time.monotonic()

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Decoding four requests together takes about as long as one: they shared decode batches.
    assert max(lasts.values()) - start < 20
    assert len(lasts) == 4


def test_flush_cache_is_refused_while_busy(server: Server) -> None:
    result: list[int] = []

    def long_request() -> None:
        server.generate({"input_ids": [9] * 20, "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}})
        result.append(1)

    t = threading.Thread(target=long_request)
    t.start()
    deadline = time.monotonic() + 10
    while server.metric("sglang:num_running_reqs") < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.request("POST", "/flush_cache")[0] == 400
    t.join()
    assert result == [1]
    assert server.request("POST", "/flush_cache?timeout=5")[0] == 200
