"""What real SGLang 0.5.16 and 0.5.23 answered and logged (tests/fixtures/sglang_cpu/recorded, from
recordings kept outside the repo: its RECORDING.md), against the harness's readers and the reference server.

* The KL probe's replay reads SGLang's logprob shape: one input entry per prompt token from
  ``logprob_start_len`` on, the first with a null logprob — so it starts one token before the output.
* The reference server answers the recorded logprob requests in the same shape, entry by entry.
* The log parser reads every batch line of every recorded log, and finds the cache implementation.
* The reference server answers the recorded /generate requests (a batch among them, streams chunk by chunk) with
  SGLang's meta_info keys in SGLang's order, timing keys included and of the recorded kinds, and the recorded bad
  requests with SGLang's status, content type and body, per the version it is told to imitate.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from hybridbench.engines.server_logs import parse_sglang_log_line, startup_cache_impl
from hybridbench.probes.kl_requests import ProbeError, output_logprobs_of_replay, parse_generate_answer

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_cpu" / "recorded"
VERSIONS = ("0.5.16", "0.5.23")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference_impl" / "server"))
from server_harness import running_server  # noqa: E402


def exchanges(version: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(gzip.decompress((RECORDED / f"exchanges-{version}.json.gz").read_bytes()))
    return data


def logprob_exchanges(version: str) -> list[dict[str, Any]]:
    """The recorded non-streaming /generate requests that asked for input logprobs."""
    return [e for e in exchanges(version) if e["path"] == "/generate" and e["status"] == 200
            and isinstance(e["request"], dict) and e["request"].get("return_logprob")
            and not e["request"].get("stream") and e["request"].get("logprob_start_len", -1) >= 0]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_probe_reads_sglangs_replay_shape(version: str) -> None:
    seen = 0
    for e in logprob_exchanges(version):
        ids, start = e["request"]["input_ids"], e["request"]["logprob_start_len"]
        ans = parse_generate_answer(e["response"])
        assert len(ans.input_logprobs) == len(ids) - start and ans.input_logprobs[0] is None
        # The probe's replay: output = everything after start + 1 (it asks from one token before the output).
        output = ids[start + 1:]
        assert len(output_logprobs_of_replay(ans.input_logprobs, len(output))) == len(output)
        # Asking from the output's first token (the probe before this fix) meets the null: a clear error.
        with pytest.raises(ProbeError, match="null"):
            output_logprobs_of_replay(ans.input_logprobs, len(output) + 1)
        seen += 1
    assert seen >= 3  # starts 0, 10 and len-1, recorded from each version


def _entries_shape(entries: list[Any]) -> list[tuple[bool, int]]:
    return [(e[0] is None, e[1]) for e in entries]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_reference_server_answers_logprobs_in_sglangs_shape(version: str) -> None:
    with running_server("--vocab-size", "1024") as server:
        for e in logprob_exchanges(version):
            got = server.generate(e["request"])["meta_info"]
            want = e["response"]["meta_info"]
            assert _entries_shape(got["input_token_logprobs"]) == _entries_shape(want["input_token_logprobs"])
            assert [len(x) for x in got["input_token_logprobs"]] == [len(x) for x in want["input_token_logprobs"]]
            assert len(got["output_token_logprobs"]) == len(want["output_token_logprobs"])
            assert all(x[0] is not None and x[2] is None for x in got["output_token_logprobs"])
            if "input_top_logprobs" in want:
                top_got, top_want = got["input_top_logprobs"], want["input_top_logprobs"]
                assert [t is None for t in top_got] == [t is None for t in top_want]
                assert [len(t) for t in top_got if t] == [len(t) for t in top_want if t]
                assert len(got["output_top_logprobs"]) == len(want["output_top_logprobs"])


def _logs() -> list[Path]:
    return sorted(RECORDED.glob("*.log.gz"))


@pytest.mark.parametrize("log", _logs(), ids=lambda p: p.name.removesuffix(".log.gz"))
def test_the_log_parser_reads_every_recorded_batch_line(log: Path, tmp_path: Path) -> None:
    text = gzip.decompress(log.read_bytes()).decode()
    lines = [line for line in text.splitlines() if "Prefill batch" in line or "Decode batch" in line]
    assert lines
    for line in lines:
        sample = parse_sglang_log_line(line)
        assert sample is not None, line
        assert sample.timestamp is not None and sample.mamba_usage is not None and sample.token_usage is not None
        if sample.kind == "prefill":
            assert sample.new_token is not None and sample.cached_token is not None, line
        else:
            assert sample.gen_throughput is not None, line
    plain = tmp_path / log.name.removesuffix(".gz")
    plain.write_text(text)
    # The cache-off arm runs SGLang's ChunkCache; every other recorded server the hybrid radix cache.
    assert startup_cache_impl(plain) == ("ChunkCache" if "disabled" in log.name else "UnifiedRadixCache")


# SGLang's timing and placement keys (reference_impl/server/timing.py measures them): present exactly where the
# recording has them, like every other key, and of the recorded kind (float, null, span list); their values are
# tested in tests/reference_impl/server/test_server_timing.py.
TIMING = {"queue_time", "decode_throughput", "dp_rank", "request_received_ts", "api_server_dispatch_finish_ts",
          "request_finished_ts", "response_sent_to_client_ts", "e2e_latency"}
ONLY_0_5_23 = {"first_token_latency", "forward_entry_time", "prefill_finished_time", "storage_prefetch_wait",
               "storage_staging_wait", "weight_versions"}


def _kind(value: Any) -> Any:
    """A JSON value's type, recursively for lists and objects (a weight-version span list, say)."""
    if isinstance(value, list):
        return ["list", sorted({json.dumps(_kind(v)) for v in value})]
    if isinstance(value, dict):
        return {k: _kind(v) for k, v in value.items()}
    return type(value).__name__


def _assert_same_meta(got: dict[str, Any], want: dict[str, Any]) -> None:
    """The same meta_info keys in SGLang's order; the timing keys of the same kinds (float, null, span list)."""
    assert list(got) == list(want)
    timing = (TIMING | ONLY_0_5_23) & set(want)
    assert {k: _kind(got[k]) for k in timing} == {k: _kind(want[k]) for k in timing}


def _sent_with_the_end(meta: dict[str, Any]) -> dict[str, Any]:
    """A recorded stream's last meta_info as it reads when the stream's first byte went out with its end (a reader
    that took every update in one chunk): its first-byte stamp is then made with the last answer and follows the
    finish keys, as in the recorded non-streamed answers (meta_info ends in response_sent_to_client_ts there)."""
    rest = {k: v for k, v in meta.items() if k != "response_sent_to_client_ts"}
    return rest | {"response_sent_to_client_ts": meta["response_sent_to_client_ts"]}


def _assert_same_keys(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert set(got) == set(want)
    _assert_same_meta(got["meta_info"], want["meta_info"])
    for meta in (got["meta_info"], want["meta_info"]):  # null without a hit, on both sides
        assert (meta["cached_tokens_details"] is None) == (meta["cached_tokens"] == 0)
    assert got["meta_info"]["finish_reason"] == want["meta_info"]["finish_reason"]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_reference_server_answers_generate_and_flush_with_sglangs_keys(version: str) -> None:
    batches = 0
    with running_server("--vocab-size", "1024", "--sglang-api-version", version) as server:
        for e in exchanges(version):
            if e["method"] != "POST" or e["status"] != 200 or not isinstance(e["request"], dict):
                continue
            if e["path"] == "/flush_cache":
                assert server.request("POST", "/flush_cache") == (200, e["response"].encode())
                continue
            if e["path"] != "/generate" or e["request"].get("stream"):
                continue
            status, raw = server.request("POST", "/generate", e["request"])
            assert status == 200, raw
            got, want = json.loads(raw), e["response"]
            if isinstance(want, list):  # a batch (input_ids as a list of prompts): one answer per prompt, in order
                assert isinstance(got, list) and len(got) == len(want) == len(e["request"]["input_ids"])
                for key in ("prompt_tokens", "completion_tokens"):
                    assert [g["meta_info"][key] for g in got] == [w["meta_info"][key] for w in want]
                batches += 1
            else:
                got, want = [got], [want]
            for g, w in zip(got, want, strict=True):
                _assert_same_keys(g, w)
    assert batches == 1


def _recorded_streams(version: str) -> list[dict[str, Any]]:
    return [e for e in exchanges(version) if e["path"] == "/generate" and e["status"] == 200
            and isinstance(e["request"], dict) and e["request"].get("stream")]


# Long enough that a reader stalled by a loaded machine (four xdist workers on two cores) still takes a first and a
# middle chunk: 40 tokens were once all coalesced into the last two.
LONG = 200


@pytest.mark.parametrize("version", VERSIONS)
def test_the_reference_server_streams_generate_with_sglangs_keys(version: str) -> None:
    """Every chunk of a recorded /generate stream (plain, and with logprobs), by position: the first (the only one
    with the first byte's stamp before the end), the middle ones, the last (the end's stamps); then [DONE]. The
    recorded streams have 4 tokens: a slow reader may get all of them in the last chunk (updates it has not taken
    are coalesced, as SGLang's are), so the same requests asking for LONG make sure first and middle chunks are
    compared (LONG updates all coalesced into two chunks would need a reader stalled for the whole stream)."""
    streams = _recorded_streams(version)
    assert len(streams) == 2
    with running_server("--vocab-size", "1024", "--sglang-api-version", version) as server:
        for e in streams:
            want = [json.loads(line[len("data: "):]) for line in e["response"][:-1]]
            assert e["response"][-1] == "data: [DONE]" and len(want) == 4
            sampling = {**e["request"]["sampling_params"], "max_new_tokens": LONG}
            longer = {**e["request"], "sampling_params": sampling}
            for request in (e["request"], longer):
                got = server.stream("/generate", request)
                assert got[-1] == "[DONE]" and len(got) >= 2
                if request is longer:
                    assert len(got) > 3  # the longer stream had first and middle chunks
                if len(got) >= 3:  # else the reader got the whole short stream in its last chunk
                    assert sorted(got[0]) == sorted(want[0])
                    _assert_same_meta(got[0]["meta_info"], want[0]["meta_info"])
                for chunk in got[1:-2]:
                    assert sorted(chunk) == sorted(want[1])
                    _assert_same_meta(chunk["meta_info"], want[1]["meta_info"])
                assert sorted(got[-2]) == sorted(want[-1])
                _assert_same_meta(got[-2]["meta_info"],
                                  _sent_with_the_end(want[-1]["meta_info"]) if len(got) == 2 else want[-1]["meta_info"])
            finish = got[-2]["meta_info"]["finish_reason"]
            assert finish == {**want[-1]["meta_info"]["finish_reason"], "length": LONG}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_version_tag_decides_the_timing_keys(version: str) -> None:
    """Told the other version, the reference server gives the other version's keys: 0.5.23's additions appear
    only with its tag, and every answer and chunk has exactly the recorded keys of the version it imitates."""
    other = {"0.5.16": "0.5.23", "0.5.23": "0.5.16"}[version]
    plain = next(e for e in exchanges(version) if e["path"] == "/generate" and e["status"] == 200
                 and isinstance(e["response"], dict) and not e["request"].get("return_logprob"))
    want = {v: next(e for e in exchanges(v) if e["request"] == plain["request"])["response"] for v in VERSIONS}
    stream = _recorded_streams(version)[0]
    with running_server("--vocab-size", "1024", "--sglang-api-version", other) as server:
        got = server.generate(plain["request"])["meta_info"]
        chunks = [c["meta_info"] for c in server.stream("/generate", stream["request"])[:-1]]
    assert list(got) == list(want[other]["meta_info"]) != list(want[version]["meta_info"])
    added = [ONLY_0_5_23 & set(meta) for meta in (got, *chunks)]
    if other == "0.5.16":
        assert added == [set()] * len(added)
    else:
        assert added[0] == ONLY_0_5_23 and added[-1] == ONLY_0_5_23
        assert all(a == ONLY_0_5_23 - {"first_token_latency", "weight_versions"} for a in added[1:-1])


def _recorded_errors(version: str) -> list[dict[str, Any]]:
    return [e for e in exchanges(version) if e["path"] == "/generate" and e["status"] not in (None, 200)]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_reference_server_refuses_as_sglang_did(version: str) -> None:
    """Status, content type and body, byte for byte where SGLang's text is known: empty input_ids (400
    ``{"error": {"message"}}`` on both), an unknown sampling field (0.5.16: 500 text/plain; 0.5.23: 400
    ``{"error": "<serde's text>"}``). The reference server imitates ``--sglang-api-version``; told the other
    version, it gives the other answer, so the tag is what decides."""
    errors = _recorded_errors(version)
    assert [e["status"] for e in errors] == [400, 500 if version == "0.5.16" else 400]
    other = {"0.5.16": "0.5.23", "0.5.23": "0.5.16"}[version]
    with running_server("--vocab-size", "1024", "--sglang-api-version", version) as server, \
            running_server("--vocab-size", "1024", "--sglang-api-version", other) as wrong:
        for e in errors:
            status, content_type, raw = server.exchange("POST", "/generate", e["request"])
            assert (status, content_type) == (e["status"], e["content_type"]), raw
            if content_type.startswith("application/json"):
                assert json.loads(raw) == e["response"]
            else:
                assert raw.decode() == e["response"]
        assert wrong.exchange("POST", "/generate", errors[1]["request"])[0] == (400 if version == "0.5.16" else 500)


def _sse(lines: list[str]) -> list[Any]:
    return [line[len("data: "):] if line == "data: [DONE]" else json.loads(line[len("data: "):]) for line in lines]


def _keys(body: dict[str, Any]) -> dict[str, Any]:
    """A completion body's key tree: top level, each choice, usage and metadata (None when null)."""
    nested = {k: (sorted(v) if isinstance(v, dict) else v is None) for k, v in body.items()
              if k in ("usage", "metadata")}
    return {"top": sorted(body), "choices": [sorted(c) for c in body["choices"]], **nested}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_reference_server_answers_v1_completions_in_sglangs_shape(version: str) -> None:
    """Plain and streamed (with ``include_usage``): the same keys at every level, chunk for chunk from the
    reason on (the text before it is split by the tokenizer), the usage alone after it. The recorded
    ``logprobs: 2`` request: the next tests."""
    recorded = [e for e in exchanges(version) if e["path"] == "/v1/completions" and not e["request"].get("logprobs")]
    assert len(recorded) == 2
    with running_server("--vocab-size", "1024", "--sglang-api-version", version) as server:
        for e in recorded:
            status, raw = server.request("POST", "/v1/completions", e["request"])
            assert status == 200, raw
            if not e["request"].get("stream"):
                assert _keys(json.loads(raw)) == _keys(e["response"])
                continue
            got = _sse([block for block in raw.decode().split("\n\n") if block.startswith("data: ")])
            want = _sse(e["response"])
            assert got[-1] == want[-1] == "[DONE]"
            assert [_keys(c) for c in got[-3:-1]] == [_keys(c) for c in want[-3:-1]]
            assert got[-2]["usage"]["completion_tokens"] == want[-2]["usage"]["completion_tokens"]
            assert all(_keys(c) == _keys(want[1]) for c in got[:-3])


def _logprobs_request(version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recorded ``logprobs: 2`` /v1/completions exchange: (request, answer)."""
    [e] = [e for e in exchanges(version) if e["path"] == "/v1/completions" and e["request"].get("logprobs")]
    return e["request"], e["response"]


def _check_logprobs(lp: dict[str, Any], n_tokens: int, top_n: int, version: str) -> None:
    """One choice's ``logprobs`` as SGLang builds it (utils.py ``to_openai_style_logprobs``): key order, one entry
    per completion token in each array, offsets -1, each token's logprob its entry in its top dict."""
    assert list(lp) == ["text_offset", "token_logprobs", "tokens", "top_logprobs"]
    assert lp["text_offset"] == [-1] * n_tokens
    assert len(lp["token_logprobs"]) == len(lp["tokens"]) == len(lp["top_logprobs"]) == n_tokens
    for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert isinstance(token, str) and isinstance(value, float) and 1 <= len(top) <= top_n
        assert all(isinstance(k, str) and isinstance(v, float) for k, v in top.items())
        if version == "0.5.16" and token == "\ufffd":  # byte fragments share the string: the last one's value
            assert top[token] <= value
        else:
            assert top[token] == value
        if version != "0.5.16":  # 0.5.23 renders every fragment's byte (latin-1): no U+FFFD anywhere
            assert "\ufffd" not in token and not any("\ufffd" in k for k in top)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_reference_server_answers_openai_logprobs_in_sglangs_shape(version: str) -> None:
    """The recorded ``logprobs: 2`` request, plain: the recorded key tree at every level, and the recorded answer
    and the reference's both pass the same per-entry checks. Streamed (not recorded; serving_completions.py): each
    chunk carries its new tokens' logprobs (several when the reader lags), together those of the plain answer."""
    request, recorded = _logprobs_request(version)
    top_n = request["logprobs"]
    _check_logprobs(recorded["choices"][0]["logprobs"], recorded["usage"]["completion_tokens"], top_n, version)
    with running_server("--vocab-size", "1024", "--sglang-api-version", version) as server:
        status, raw = server.request("POST", "/v1/completions", request)
        assert status == 200, raw
        body = json.loads(raw)
        assert _keys(body) == _keys(recorded)
        whole = body["choices"][0]["logprobs"]
        _check_logprobs(whole, body["usage"]["completion_tokens"], top_n, version)
        assert body["usage"]["completion_tokens"] == recorded["usage"]["completion_tokens"]
        chunks = server.stream("/v1/completions", request)
        assert chunks[-1] == "[DONE]"
        parts = [c["choices"][0]["logprobs"] for c in chunks[:-1]]
        assert all(p is None or list(p) == list(whole) for p in parts)
        for key in whole:
            assert [x for p in parts if p is not None for x in p[key]] == whole[key]


def test_the_version_tag_decides_the_fragment_token_strings() -> None:
    """0.5.16 and 0.5.23 answered the recorded request with the same logprobs; where 0.5.16 gives a byte fragment's
    decode (U+FFFD), 0.5.23 gives its byte as one latin-1 character (utils.py 0.5.23 ``_lossless_token_text``).
    The reference server told each version answers the same request in the same relation."""

    def fragment(token: str) -> str:  # 0.5.23's latin-1 byte -> 0.5.16's U+FFFD
        return "\ufffd" if len(token) == 1 and 0x80 <= ord(token) <= 0xFF else token

    def related(old: dict[str, Any], new: dict[str, Any]) -> int:
        """0.5.16's answer from 0.5.23's: every fragment's string U+FFFD, the top dicts rebuilt by SGLang's
        comprehension (equal strings collapse, the first's place, the last's value). Returns the changes."""
        assert old["token_logprobs"] == new["token_logprobs"]
        assert old["tokens"] == [fragment(t) for t in new["tokens"]]
        rebuilt = [{fragment(k): v for k, v in top.items()} for top in new["top_logprobs"]]
        assert [list(t.items()) for t in old["top_logprobs"]] == [list(t.items()) for t in rebuilt]
        keys = new["tokens"] + [k for top in new["top_logprobs"] for k in top]
        return sum(fragment(k) != k for k in keys)

    recorded = [_logprobs_request(v)[1]["choices"][0]["logprobs"] for v in VERSIONS]
    assert related(*recorded) >= 2  # recorded: 'Ó' and 'Î'
    answers = []
    for version in VERSIONS:
        with running_server("--vocab-size", "1024", "--sglang-api-version", version) as server:
            status, raw = server.request("POST", "/v1/completions", {**_logprobs_request(version)[0], "logprobs": 20})
            assert status == 200, raw
            answers.append(json.loads(raw)["choices"][0]["logprobs"])
    assert related(*answers) >= 2
