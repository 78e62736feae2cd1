"""engine=vllm's client hands the driver the ids vLLM generated; TokenSpeed's is never asked for them.

A session's next turn carries the output ids the client read (hybridbench.load.driver). The OpenAI client read none,
so on vLLM every later turn carried the trace's recorded answer while SGLang's carried its own: the engines were
compared on different conversations. vLLM streams each chunk's new ids in ``choices[0].token_ids`` when the request
sets ``"return_token_ids": true``; TokenSpeed's gateway is not known to take the field, so it is not sent there.
The real-server side of this (a two-turn session on vLLM 0.32.0) is tests/vllm_cpu/test_vllm_output_ids.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sse_stub import stream_events

from hybridbench.engines.launchers import make_vllm_engine
from hybridbench.engines.server import ServerEngine
from hybridbench.engines.tokenspeed import TokenSpeedEngine
from hybridbench.load.client import ClientResult, Generate, client_for, generate_openai
from hybridbench.load.trial import ServerTrials

PROMPT = [1, 5, 9, 200, 31]
# Recorded from real vLLM 0.32.0 (the CPU build, tests/vllm_cpu) serving tiny-llama as "m", answering the client's
# own request body for PROMPT with max_tokens 4 and "return_token_ids": true. The first chunk echoes the prompt.
VLLM_TOKEN_IDS = [
    'data: {"id":"cmpl-9ea0dc4c1d1549cd","object":"text_completion","created":1796087372,"model":"m","choices":'
    '[{"index":0,"text":" w778","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":'
    '[1,5,9,200,31],"token_ids":[778]}]}',
    'data: {"id":"cmpl-9ea0dc4c1d1549cd","object":"text_completion","created":1796087372,"model":"m","choices":'
    '[{"index":0,"text":" w778","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,'
    '"token_ids":[778]}]}',
    'data: {"id":"cmpl-9ea0dc4c1d1549cd","object":"text_completion","created":1796087372,"model":"m","choices":'
    '[{"index":0,"text":" w778","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,'
    '"token_ids":[778]}]}',
    'data: {"id":"cmpl-9ea0dc4c1d1549cd","object":"text_completion","created":1796087372,"model":"m","choices":'
    '[{"index":0,"text":" w243","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_token_ids":null,'
    '"token_ids":[243]}]}',
    'data: {"id":"cmpl-9ea0dc4c1d1549cd","object":"text_completion","created":1796087372,"model":"m","choices":[],'
    '"usage":{"prompt_tokens":5,"total_tokens":9,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":0}},'
    '"system_fingerprint":"vllm-0.32.0-0988f2d8"}',
    "data: [DONE]",
]
ANSWER = [778, 778, 778, 243]  # the same request without streaming: "token_ids":[778,778,778,243]


_NO_KEY = object()


def _ids(line: str, ids: Any) -> str:
    """A recorded chunk with its choice's token_ids set to ``ids`` (None: JSON null), or dropped (_NO_KEY)."""
    chunk = json.loads(line.removeprefix("data: "))
    if ids is _NO_KEY:
        del chunk["choices"][0]["token_ids"]
    else:
        chunk["choices"][0]["token_ids"] = ids
    return "data: " + json.dumps(chunk)


def drive(lines: list[str], generate: Generate) -> tuple[ClientResult, dict[str, Any]]:
    """``lines`` streamed one event at a time to ``generate``; its result and the request body it sent."""
    got = stream_events(lines, lambda pool: generate(pool, PROMPT, 4, 30.0, model="m"), gap_s=0.005)
    return got.result, got.body


def _engine_client(engine: ServerEngine) -> Generate:
    return ServerTrials(engine).generate


def test_vllms_client_asks_for_the_generated_ids_and_hands_on_the_whole_answer() -> None:
    res, body = drive(VLLM_TOKEN_IDS, _engine_client(make_vllm_engine()))
    assert body["return_token_ids"] is True
    assert res.status == "ok", res.error
    assert res.output_tokens == 4
    assert res.output_ids == ANSWER  # was []: the next turn carried the trace's answer


def test_tokenspeeds_client_never_sends_the_field() -> None:
    # Its Rust gateway's handling of an unknown field is unknown: the request is the one it always was.
    res, body = drive(VLLM_TOKEN_IDS, _engine_client(TokenSpeedEngine()))
    assert "return_token_ids" not in body
    assert set(body) == {"model", "prompt", "max_tokens", "temperature", "stream", "ignore_eos", "stream_options"}
    assert res.status == "ok" and res.output_tokens == 4
    assert res.output_ids == []  # unasked, ids in a stream are not read: the trace's answer, as documented


@pytest.mark.parametrize("ids", [None, _NO_KEY], ids=["null (0.32.0 unasked)", "no key (vLLM before the field)"])
def test_a_stream_without_ids_leaves_the_output_empty(ids: Any) -> None:
    # An older vLLM ignores the request field (its OpenAIBaseModel allows extras) and its stream choice has no
    # token_ids; 0.32.0 sends null when not asked. Either way the request succeeds and no ids are handed on.
    lines = [_ids(line, ids) if '"choices":[{' in line else line for line in VLLM_TOKEN_IDS]
    res, _ = drive(lines, client_for("openai", return_token_ids=True))
    assert res.status == "ok", res.error
    assert res.output_tokens == 4 and res.output_ids == []


@pytest.mark.parametrize("cut", ["a chunk without ids", "ids short of the count", "more ids than the count"])
def test_ids_that_are_not_the_whole_answer_are_not_handed_on(cut: str) -> None:
    lines = list(VLLM_TOKEN_IDS)
    if cut == "a chunk without ids":
        lines[2] = _ids(lines[2], None)
    elif cut == "ids short of the count":
        lines[3] = _ids(lines[3], [])
    else:
        lines[3] = _ids(lines[3], [243, 9])
    res, _ = drive(lines, client_for("openai", return_token_ids=True))
    assert res.status == "ok" and res.output_tokens == 4
    assert res.output_ids == []


def test_only_the_openai_client_can_be_asked_for_ids() -> None:
    assert client_for("openai") is generate_openai
    with pytest.raises(ValueError, match="sglang client has no return_token_ids"):
        client_for("sglang", return_token_ids=True)
    with pytest.raises(ValueError, match="unknown client 'grpc'"):
        client_for("grpc")


def test_ids_that_are_not_integers_fail_the_request() -> None:
    # As the native client: an answer whose ids cannot be read is malformed, not a success without ids.
    lines = list(VLLM_TOKEN_IDS)
    lines[1] = _ids(lines[1], ["w778"])
    res, _ = drive(lines, client_for("openai", return_token_ids=True))
    assert res.status == "error" and "ValueError" in res.error
    assert res.output_ids == []


def test_vllms_prompt_echo_is_not_parsed_and_the_answer_is_unchanged() -> None:
    # vLLM sends the prompt's ids back on the first token's chunk: 0.8 MB of JSON at 128k tokens, parsed on the one
    # loop that timestamps every stream. They are cut out as bytes; a chunk spelt otherwise is parsed whole.
    from hybridbench.load.client import _without_prompt_echo

    first = VLLM_TOKEN_IDS[0].removeprefix("data: ").encode()
    cut = json.loads(_without_prompt_echo(first))
    assert cut["choices"][0]["prompt_token_ids"] is None
    assert {**cut, "choices": [{**cut["choices"][0], "prompt_token_ids": PROMPT}]} == json.loads(first)
    spaced = first.replace(b'"prompt_token_ids":', b'"prompt_token_ids": ')
    assert _without_prompt_echo(spaced) == spaced
    res, _ = drive(VLLM_TOKEN_IDS, _engine_client(make_vllm_engine()))
    assert res.output_ids == ANSWER and res.output_tokens == 4


def test_vllms_client_does_not_ask_when_no_turn_carries_the_answer() -> None:
    # A session's last turn (every turn of a single-turn load): vLLM would encode the whole prompt's ids into the
    # first token's chunk, inside the TTFT measured, for ids nothing uses.
    client = _engine_client(make_vllm_engine())
    unasked = [_ids(line, None) if '"choices":[{' in line else line for line in VLLM_TOKEN_IDS]
    got = stream_events(unasked, lambda pool: client(pool, PROMPT, 4, 30.0, model="m", answer_needed=False),
                        gap_s=0.005)
    assert "return_token_ids" not in got.body
    assert got.result.status == "ok" and got.result.output_tokens == 4 and got.result.output_ids == []
