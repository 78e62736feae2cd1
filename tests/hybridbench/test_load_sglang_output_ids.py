"""The native client hands the driver a request's whole output, or none: never a piece of it.

A session's next turn carries the output ids the client read (hybridbench.load.driver). SGLang launched with
``--incremental-streaming-output`` (``--stream-output`` before it; both are tuning flags ``engine.extra_args``
passes) streams each chunk's new ids only, its ``completion_tokens`` still the running count
(tokenizer_manager.py ``_handle_batch_output``, 0.5.16:2028-2050, 0.5.23:2625-2650). Kept as "the last list", the
answer was its last token: every later turn was sent with a conversation the server never produced, recorded ok,
and its hits and TTFT measured that prompt.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from sse_stub import stream_events

from hybridbench.load.client import ClientResult, generate_sglang

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "sglang_cpu"))
from replay_server import exchanges


def recorded_stream(version: str) -> tuple[list[int], list[dict[str, Any]]]:
    """The golden recording's streamed /generate: its prompt and its chunks (each with the whole output so far)."""
    e = next(e for e in exchanges(version) if e["path"] == "/generate" and e["request"].get("stream")
             and not e["request"].get("return_logprob"))
    return e["request"]["input_ids"], [json.loads(line.removeprefix("data: ")) for line in e["response"][:-1]]


def incremental(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same answer as SGLang streams it with --incremental-streaming-output: each chunk's new text and ids."""
    out, ids, text = [], 0, 0
    for c in chunks:
        out.append({**c, "text": c["text"][text:], "output_ids": c["output_ids"][ids:]})
        ids, text = len(c["output_ids"]), len(c["text"])
    return out


def drive(chunks: list[dict[str, Any]], prompt: list[int], asked: int) -> ClientResult:
    """``chunks`` streamed one event at a time, as a server streaming token by token."""
    events = [f"data: {json.dumps(c)}" for c in chunks] + ["data: [DONE]"]
    return stream_events(events, lambda pool: generate_sglang(pool, prompt, asked, 30.0), gap_s=0.01).result


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
@pytest.mark.parametrize("mode", ["whole lists", "incremental"])
def test_the_output_handed_on_is_the_whole_answer_however_sglang_streams_it(version: str, mode: str) -> None:
    prompt, chunks = recorded_stream(version)
    answer = chunks[-1]["output_ids"]
    res = drive(chunks if mode == "whole lists" else incremental(chunks), prompt, len(answer))
    assert res.status == "ok", res.error
    assert res.output_tokens == len(answer) == 4 and len(res.itl_ms) == 3
    assert res.output_ids == answer  # was [11], the last chunk's new id, with --incremental-streaming-output


def test_ids_that_are_not_the_whole_answer_are_not_handed_on() -> None:
    # Neither the whole output nor its pieces: the driver then sends the trace's own next turn, not a made-up one.
    prompt, chunks = recorded_stream("0.5.23")
    res = drive([chunks[0], {**chunks[-1], "output_ids": chunks[-1]["output_ids"][:2]}], prompt, 4)
    assert res.status == "ok" and res.output_tokens == 4
    assert res.output_ids == []
