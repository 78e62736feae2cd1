"""A failed turn ends its session: the session's later turns are recorded as not sent, never sent.

A later turn re-sends the conversation so far. After a failed turn that conversation holds an answer the server never
gave (the trace's recorded one): its hit and its TTFT measure a request no real client would send. So, as a
multi-turn client does, the driver sends nothing more of that session, and records each turn it did not send
(status ``skipped``, no send time), so every planned request is still accounted for, once.

The server here is a real HTTP server speaking SGLang's /generate stream, and it fails one chosen request in the ways
a server fails (an HTTP error, an error inside the stream, no answer before the client's timeout, a dropped
connection); the real client reads it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from drive_stub import serve_and_drive

from hybridbench.checks.base import CheckInput
from hybridbench.checks.builtin import survival
from hybridbench.config.schema import ChecksCfg, LoadCfg
from hybridbench.load.driver import Completed
from hybridbench.load.trial import outcome
from hybridbench.metrics.summary import summarize
from hybridbench.plan.types import Trial
from hybridbench.records.build import trial_record
from hybridbench.records.coverage import TrialOutcome, coverage
from hybridbench.records.schema import Record, record_from_json
from workloads.trace import TraceRow

FAIL, LATER = 999, 777  # the failing turn's new token; the token only the turn after it adds
TIMEOUT_S = 0.5


def session(sid: str, news: list[tuple[int, ...]], out: int = 3) -> list[TraceRow]:
    """A recorded conversation: each turn's input is the previous input, its recorded answer, then new tokens."""
    rows: list[TraceRow] = []
    history: tuple[int, ...] = ()
    for t, new in enumerate(news):
        inp = (*history, *new)
        answer = tuple(500 + 10 * t + k for k in range(out))  # the trace's answers: never what the server says
        rows.append(TraceRow(sid, t, 0.0, inp, answer))
        history = (*inp, *answer)
    return rows


# Session A fails at its turn 1 (of 4); session B is unaffected.
ROWS = [*session("A", [(1, 2), (FAIL,), (LATER,), (8,)]), *session("B", [(3, 4), (5,)])]


class Server:
    """Answers /generate as SGLang streams it, except a prompt whose last token is FAIL, which fails as ``mode``."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.prompts: list[list[int]] = []

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        prompt: list[int] = body["input_ids"]
        n = body["sampling_params"]["max_new_tokens"]
        self.prompts.append(prompt)
        failing = prompt[-1] == FAIL
        if failing and self.mode == "http":
            return web.Response(status=500, text="Internal Server Error")
        if failing and self.mode == "timeout":
            await asyncio.sleep(TIMEOUT_S * 4)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        out: list[int] = []
        for k in range(n):
            await asyncio.sleep(0.002)
            out.append(2000 + len(prompt) + k)  # what the server generates: never the trace's answer
            chunk = {"text": "x" * len(out), "output_ids": out,
                     "meta_info": {"completion_tokens": len(out), "cached_tokens": 0,
                                   "finish_reason": {"type": "length", "length": n} if k == n - 1 else None}}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if failing and self.mode == "in_band":  # SGLang's abort, e.g. "Not enough space for mamba cache"
                abort = {"text": "x", "output_ids": out, "meta_info": {
                    "completion_tokens": len(out), "finish_reason": {"type": "abort", "message": "out of memory"}}}
                await resp.write(f"data: {json.dumps(abort)}\n\n".encode())
                break
            if failing and self.mode == "dropped":
                assert request.transport is not None
                request.transport.close()
                return resp
        await resp.write(b"data: [DONE]\n\n")
        return resp


async def _drive(server: Server, load: LoadCfg, rows: list[TraceRow]) -> list[Completed]:
    return await serve_and_drive(rows, load, server, timeout_s=TIMEOUT_S)


def records_of(done: list[Completed]) -> list[Record]:
    trial = Trial(index=0, arm="lru", workload="w", repeat=0, seed=0)
    return [trial_record("run", trial, outcome(c), "cold-flushed") for c in done]


MODES = [("http", "error", "HTTP 500"), ("in_band", "error", "out of memory"),
         ("timeout", "timeout", "no complete response"), ("dropped", "server_died", "")]
LOADS = [LoadCfg(kind="closed", max_concurrency=2), LoadCfg(kind="poisson", request_rate=200.0, max_concurrency=2)]


@pytest.mark.parametrize(("mode", "status", "error"), MODES)
@pytest.mark.parametrize("load", LOADS, ids=["closed", "poisson"])
def test_a_failed_turn_ends_its_session_and_the_rest_is_recorded_as_not_sent(
        mode: str, status: str, error: str, load: LoadCfg) -> None:
    server = Server(mode)
    done = asyncio.run(_drive(server, load, ROWS))
    # The server never saw session A after its failed turn: a later prompt would carry an answer it never gave.
    after = [p for p in server.prompts if LATER in p]
    assert not after, f"turn 2 of session A was sent after turn 1 failed: {after}"
    assert len(server.prompts) == 4  # A0, A1 (failed), B0, B1
    # Every planned request has exactly one record.
    assert sorted(c.index for c in done) == list(range(len(ROWS)))
    by_turn = {(c.row.session_id, c.row.turn_id): c for c in done}
    failed = by_turn["A", 1].result
    assert failed.status == status and error in failed.error
    for t in (2, 3):
        c = by_turn["A", t]
        assert c.result.status == "skipped" and c.result.sent is None and c.prompt == []
        assert f"turn 1 of session 'A' failed ({status})" in c.result.error
    assert all(by_turn[k].result.status == "ok" for k in (("A", 0), ("B", 0), ("B", 1)))
    # B's second turn still carries what the server generated for B's first.
    b0, b1 = by_turn["B", 0], by_turn["B", 1]
    assert b1.prompt == [*b0.prompt, *b0.result.output_ids, 5]
    # The skipped turns' records: nothing sent, nothing timed, no client delay; recorded after their failed turn.
    records = records_of(done)
    skipped = [r for r in records if r.status == "skipped"]
    assert [(r.session_id, r.turn_id) for r in skipped] == [("A", 2), ("A", 3)]
    for r in skipped:
        assert (r.sent_s, r.first_token_s, r.end_s, r.ttft_ms, r.client_delay_ms) == (None,) * 5
        assert (r.prompt_tokens, r.output_tokens, r.cached_tokens) == (0, 0, None)
    order = [(c.row.session_id, c.row.turn_id) for c in done]
    assert order.index(("A", 1)) < order.index(("A", 2)) < order.index(("A", 3))


def test_a_failed_last_turn_skips_nothing_and_a_first_turn_failure_skips_the_whole_session() -> None:
    rows = [*session("A", [(1, 2), (FAIL,)]), *session("B", [(FAIL,), (LATER,), (6,)])]
    server = Server("http")
    done = asyncio.run(_drive(server, LoadCfg(kind="closed", max_concurrency=1), rows))
    statuses = {(c.row.session_id, c.row.turn_id): c.result.status for c in done}
    assert statuses == {("A", 0): "ok", ("A", 1): "error", ("B", 0): "error", ("B", 1): "skipped",
                        ("B", 2): "skipped"}
    assert len(server.prompts) == 3 and not [p for p in server.prompts if LATER in p]


def test_survival_fails_on_the_failed_turn_and_names_the_turns_not_sent() -> None:
    """The records of a drive with a failed turn: complete (every planned request once), the summary counts the
    turns not sent among the requests that did not complete, and survival fails naming both."""
    done = asyncio.run(_drive(Server("http"), LOADS[0], ROWS))
    records = [record_from_json(r.to_json()) for r in records_of(done)]  # as a re-scoring reads them back
    assert coverage(len(ROWS), records).complete
    summary = summarize(records)
    assert summary["completed"] == 3 and summary["failed"] == 3  # A1 failed; A2, A3 not sent
    assert summary["total_input_tokens"] == sum(r.prompt_tokens for r in records if r.status == "ok")
    trial = TrialOutcome(records[0].trial_id, "w", "lru", 0, "ran", len(ROWS))
    inp = CheckInput(ChecksCfg(), ("lru",), "lru", ("w",), {("w", "lru"): records}, {}, {}, 0,  # type: ignore[arg-type]
                     trials={("w", "lru"): [trial]})
    (row,) = survival(inp)
    assert row.status == "fail" and row.observed == 3.0
    assert row.detail.startswith("1 of 6 requests failed (error: HTTP 500")
    assert "2 later turn(s) of a failed session not sent" in row.detail
