"""The OpenAI ``logprobs`` (/v1/completions with ``echo``, /v1/chat/completions) carry the model's own logprobs,
the ones /generate returns.

Shapes against the recordings: tests/hybridbench/test_sglang_recorded.py. Here the values: the same greedy request
through both endpoints of one server, plain and streamed, with and without the prompt's (echo), per version tag.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
from collections.abc import Iterator
from typing import Any

import pytest
from server_harness import Server, running_server

from reference_impl.model.executor import RequestCtx
from reference_impl.server.openai_logprobs import chat_logprobs, choice_logprobs

VERSIONS = ("0.5.16", "0.5.23")
PROMPT = "caf\u00e9 \u4e16\u754c: "  # multi-byte characters: byte tokens whose lone decode is U+FFFD
TOP = 4


@pytest.fixture(scope="module", params=VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def server(version: str) -> Iterator[Server]:
    with running_server("--sglang-api-version", version, "--log-level", "warning") as s:
        yield s


def expected_string(version: str, token: int, text: str) -> str:
    """SGLang's token string from /generate's decode of the token alone: 0.5.23 writes a fragment's byte as latin-1
    (the reference tokenizer: ids 0-255 are bytes)."""
    if version == "0.5.16" or "\ufffd" not in text or token >= 256:
        return text
    return bytes([token]).decode("latin-1")


def completion(server: Server, **extra: Any) -> dict[str, Any]:
    body = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "ignore_eos": True, **extra}
    status, raw = server.request("POST", "/v1/completions", body)
    assert status == 200, raw
    result: dict[str, Any] = json.loads(raw)
    return result


def generate(server: Server, **extra: Any) -> dict[str, Any]:
    return server.generate({"text": PROMPT, "sampling_params": {"max_new_tokens": 6, "temperature": 0,
                            "ignore_eos": True}, "return_logprob": True, "top_logprobs_num": TOP,
                            "return_text_in_logprobs": True, **extra})["meta_info"]


def openai_entries(version: str, entries: list[list[Any]], tops: list[Any]) -> dict[str, Any]:
    """What SGLang's ``to_openai_style_logprobs`` makes of /generate's entries, restated here."""
    def top(row: list[list[Any]] | None) -> dict[str, float] | None:
        return None if row is None else {expected_string(version, t, x): v for v, t, x in row}
    return {"text_offset": [-1] * len(entries), "token_logprobs": [v for v, _, _ in entries],
            "tokens": [expected_string(version, t, x) for _, t, x in entries], "top_logprobs": [top(r) for r in tops]}


def test_completion_logprobs_are_generates_output_logprobs(server: Server, version: str) -> None:
    meta = generate(server)
    want = openai_entries(version, meta["output_token_logprobs"], meta["output_top_logprobs"])
    body = completion(server, logprobs=TOP)
    [choice] = body["choices"]
    assert choice["logprobs"] == want
    assert list(choice["logprobs"]) == list(want)
    assert all(len(top) <= TOP for top in want["top_logprobs"])
    # streamed: every chunk with new tokens carries theirs, in order; together the whole answer's
    parts = [c["choices"][0]["logprobs"] for c in server.stream("/v1/completions", {
        "prompt": PROMPT, "max_tokens": 6, "temperature": 0, "ignore_eos": True, "logprobs": TOP})[:-1]]
    joined = {k: [x for p in parts if p is not None for x in p[k]] for k in want}
    assert joined == want


def test_echo_prepends_the_prompt_and_its_logprobs(server: Server, version: str) -> None:
    """Echo with N > 0: SGLang asks for the prompt's logprobs from position 0, the first null (no context)."""
    meta = generate(server, logprob_start_len=0)
    n_prompt = len(PROMPT.encode())
    assert len(meta["input_token_logprobs"]) == n_prompt
    want = openai_entries(version, meta["input_token_logprobs"] + meta["output_token_logprobs"],
                          meta["input_top_logprobs"] + meta["output_top_logprobs"])
    body = completion(server, logprobs=TOP, echo=True)
    [choice] = body["choices"]
    assert choice["logprobs"] == want
    assert choice["logprobs"]["token_logprobs"][0] is None and choice["logprobs"]["top_logprobs"][0] is None
    assert choice["text"].startswith(PROMPT) and len(choice["text"]) > len(PROMPT)
    fragments = [t for t in choice["logprobs"]["tokens"][:n_prompt] if len(t.encode()) != 1]
    assert fragments == (["\ufffd"] * 8 if version == "0.5.16" else list(PROMPT.encode()[3:5].decode("latin-1"))
                         + list(PROMPT.encode()[6:12].decode("latin-1")))
    # streamed: the prompt's entries and text in the first chunk only
    events = server.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "temperature": 0,
                                               "ignore_eos": True, "logprobs": TOP, "echo": True})
    first, *rest = [e["choices"][0] for e in events[:-1] if e["choices"]]
    assert first["text"].startswith(PROMPT) and not any(PROMPT in c["text"] for c in rest)
    assert first["logprobs"]["tokens"][:n_prompt] == want["tokens"][:n_prompt]
    joined = {k: [x for c in (first, *rest) if c["logprobs"] for x in c["logprobs"][k]] for k in want}
    assert joined == want


def test_logprobs_zero_has_no_top_logprobs(server: Server) -> None:
    """N = 0: the tokens' own logprobs, no top logprobs at all (SGLang produces none: ``top_logprobs: []``)."""
    meta = generate(server)
    lp = completion(server, logprobs=0)["choices"][0]["logprobs"]
    assert lp["top_logprobs"] == []
    assert lp["token_logprobs"] == [v for v, _, _ in meta["output_token_logprobs"]]
    assert completion(server)["choices"][0]["logprobs"] is None  # not asked: null


def test_echo_with_logprobs_zero(server: Server, version: str) -> None:
    """0.5.23 echoes the text and gives the output's logprobs only; 0.5.16 fails reading the prompt's top logprobs
    it never asked for: 500 without a stream, the connection dropped after the 200 with one."""
    body = {"prompt": PROMPT, "max_tokens": 2, "temperature": 0, "logprobs": 0, "echo": True}
    if version == "0.5.23":
        [choice] = completion(server, **body)["choices"]
        assert choice["text"].startswith(PROMPT) and len(choice["logprobs"]["tokens"]) == 2
        return
    status, raw = server.request("POST", "/v1/completions", body)
    assert status == 500 and json.loads(raw) == {
        "object": "error", "message": "Internal server error: 'input_top_logprobs'", "type": "InternalServerError",
        "param": None, "code": 500}
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, OSError)):
        server.request("POST", "/v1/completions", {**body, "stream": True})
    assert server.proc.poll() is None


def test_a_batch_gets_logprobs_per_choice(server: Server) -> None:
    prompts = [[5, 6, 7], [9, 10, 11, 12]]
    status, raw = server.request("POST", "/v1/completions", {"prompt": prompts, "max_tokens": 3, "temperature": 0,
                                                              "ignore_eos": True, "logprobs": 1, "echo": True})
    assert status == 200, raw
    for prompt, choice in zip(prompts, json.loads(raw)["choices"], strict=True):
        lp = choice["logprobs"]
        assert len(lp["tokens"]) == len(prompt) + 3 and lp["token_logprobs"][0] is None
        assert lp["tokens"][: len(prompt)] == [chr(t) for t in prompt]


def chat_entry(version: str, token: int, text: str, logprob: float) -> dict[str, Any]:
    """serving_chat.py: 0.5.16 the completions' string and its UTF-8; 0.5.23 the decode and the raw bytes."""
    if version == "0.5.16":
        text = expected_string(version, token, text)
        return {"token": text, "bytes": list(text.encode()), "logprob": logprob}
    return {"token": text, "bytes": [token] if token < 256 else list(text.encode()), "logprob": logprob}


def test_chat_logprobs_are_generates_output_logprobs(server: Server, version: str) -> None:
    """Not recorded: the shapes from SGLang's source (reference_impl/server/openai_logprobs.py ``chat_logprobs``)."""
    messages = [{"role": "user", "content": PROMPT}]
    meta = server.generate({"text": f"<|user|>\n{PROMPT}\n<|assistant|>\n", "sampling_params": {
        "max_new_tokens": 6, "temperature": 0, "ignore_eos": True}, "return_logprob": True,
        "top_logprobs_num": TOP, "return_text_in_logprobs": True})["meta_info"]
    tops = []
    for row in meta["output_top_logprobs"]:
        if version == "0.5.16":  # via the completions' dict: equal strings collapse
            collapsed = {expected_string(version, t, x): v for v, t, x in row}
            tops.append([{"token": k, "bytes": list(k.encode()), "logprob": v} for k, v in collapsed.items()])
        else:
            tops.append([chat_entry(version, t, x, v) for v, t, x in row])
    assert any(t < 256 and "\ufffd" in x for row in meta["output_top_logprobs"] for _, t, x in row)  # fragments
    want = [{**chat_entry(version, t, x, v), "top_logprobs": top}
            for (v, t, x), top in zip(meta["output_token_logprobs"], tops, strict=True)]
    body = {"messages": messages, "max_tokens": 6, "temperature": 0, "ignore_eos": True, "logprobs": True,
            "top_logprobs": TOP}
    status, raw = server.request("POST", "/v1/chat/completions", body)
    assert status == 200, raw
    assert json.loads(raw)["choices"][0]["logprobs"] == {"content": want}
    chunks = [e["choices"][0]["logprobs"] for e in server.stream("/v1/chat/completions", body)[:-1] if e["choices"]]
    parts = [c["content"] for c in chunks if c is not None]
    assert [{k: v for k, v in e.items() if k != "top_logprobs"} for p in parts for e in p] == [
        {k: v for k, v in e.items() if k != "top_logprobs"} for e in want]
    if version == "0.5.16":  # every token of a chunk gets the chunk's first top list
        assert all(e["top_logprobs"] == p[0]["top_logprobs"] for p in parts for e in p)
    else:
        assert [e for p in parts for e in p] == want
    status, raw = server.request("POST", "/v1/chat/completions", {**body, "top_logprobs": 0})
    assert all(e["top_logprobs"] == [] for e in json.loads(raw)["choices"][0]["logprobs"]["content"])
    status, raw = server.request("POST", "/v1/chat/completions", {**body, "logprobs": False})
    assert json.loads(raw)["choices"][0]["logprobs"] is None


def test_a_multi_token_chat_chunk_under_each_version() -> None:
    """A chunk of two tokens (a lagging reader's, which the HTTP tests cannot force): 0.5.16 gives both the first
    token's top list, 0.5.23 each its own; 0.5.16's top dicts collapse two fragments into one U+FFFD entry holding
    the second's logprob, 0.5.23 keeps both with their bytes."""
    ctx = RequestCtx(top_logprobs_num=3)
    ctx.output_logprobs = [(-1.0, [(-1.0, 65), (-2.0, 0xC3), (-3.0, 0xA9)]), (-0.5, [(-0.5, 300), (-4.0, 66)])]
    old = chat_logprobs(ctx, [65, 300], 0, top_n=3, stream=True, version="0.5.16")
    new = chat_logprobs(ctx, [65, 300], 0, top_n=3, stream=True, version="0.5.23")
    assert old is not None and new is not None
    assert old["content"][1]["top_logprobs"] == old["content"][0]["top_logprobs"] == [
        {"token": "A", "bytes": [65], "logprob": -1.0}, {"token": "\ufffd", "bytes": [239, 191, 189], "logprob": -3.0}]
    assert [e["token"] for e in new["content"][1]["top_logprobs"]] == ["<300>", "B"]
    assert new["content"][0]["top_logprobs"][1:] == [{"token": "\ufffd", "bytes": [0xC3], "logprob": -2.0},
                                                     {"token": "\ufffd", "bytes": [0xA9], "logprob": -3.0}]
    assert chat_logprobs(ctx, [65, 300], 2, top_n=3, stream=True, version="0.5.23") is None  # nothing new
    lp = choice_logprobs(ctx, [65], [65, 300], 0, top_n=3, prompt=False, version="0.5.16")
    assert lp is not None and lp["top_logprobs"][0] == {"A": -1.0, "\ufffd": -3.0}
    lp = choice_logprobs(ctx, [65], [65, 300], 0, top_n=3, prompt=False, version="0.5.23")
    assert lp is not None and lp["top_logprobs"][0] == {"A": -1.0, "\u00c3": -2.0, "\u00a9": -3.0}
