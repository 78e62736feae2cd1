"""The load driver against a local streaming server that speaks SGLang's /generate SSE protocol.

The server here is test equipment, not a stand-in for SGLang's behaviour: it records what the
driver did (concurrency, order, prompts) so the driver's own rules can be checked.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from typing import Any

import pytest
from aiohttp import web
from drive_stub import serve_and_drive

from hybridbench.config.schema import LoadCfg
from hybridbench.load import event_loop
from hybridbench.load.client import ClientResult, generate_sglang
from hybridbench.load.driver import Completed, drive
from hybridbench.load.http import StreamPool
from hybridbench.load.trial import outcome
from hybridbench.metrics.summary import summarize
from hybridbench.plan.load import plan_load
from hybridbench.plan.types import Trial
from hybridbench.records.build import trial_record
from hybridbench.records.schema import Record
from workloads.arrival import arrival_schedule
from workloads.trace import TraceRow


def intended_times(rows: list[TraceRow], load: LoadCfg, seed: int) -> list[float]:
    """The schedule the plan builds for ``load`` (what the driver follows)."""
    return list(arrival_schedule(rows, plan_load(load), seed).times_s)


class Recorder:
    def __init__(self, token_delay: float = 0.01) -> None:
        self.in_flight = 0
        self.peak = 0
        self.prompts: list[list[int]] = []
        self.token_delay = token_delay

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        prompt = body["input_ids"]
        n = body["sampling_params"]["max_new_tokens"]
        self.prompts.append(prompt)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        out: list[int] = []
        try:
            for k in range(n):
                await asyncio.sleep(self.token_delay)
                out.append(1000 + len(prompt) + k)  # depends on the prompt, so substitution is checkable
                meta = {"completion_tokens": k + 1, "cached_tokens": len(prompt) // 2,
                        "finish_reason": {"type": "length", "length": n} if k == n - 1 else None}
                chunk = {"text": "x" * (k + 1), "output_ids": out, "meta_info": meta}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
        finally:
            self.in_flight -= 1
        return resp


def test_closed_loop_never_exceeds_max_concurrency_and_times_like_bench_serving() -> None:
    rows = [TraceRow(i, 0, 0.0, (1, 2, 3, i), (0,) * 4) for i in range(12)]
    rec = Recorder()
    done = asyncio.run(serve_and_drive(rows, LoadCfg(kind="closed", max_concurrency=3), rec))
    assert len(done) == 12 and rec.peak == 3
    for c in done:
        r = c.result
        assert r.status == "ok" and r.output_tokens == 4 and r.cached_tokens == 2
        assert r.first_token is not None and r.end is not None and r.sent < r.first_token <= r.end
        assert len(r.itl_ms) == 3 and all(x > 5 for x in r.itl_ms)  # one gap per token after the first


def test_next_turn_waits_for_the_previous_and_carries_the_generated_output() -> None:
    t1_in, t1_out = (5, 6, 7), (90, 91)
    t2_in = (*t1_in, *t1_out, 42)  # recorded conversation: turn 2 extends turn 1 input + output
    rows = [TraceRow("s", 0, 0.0, t1_in, t1_out), TraceRow("s", 1, 0.0, t2_in, (9,))]
    rec = Recorder()
    done = asyncio.run(serve_and_drive(rows, LoadCfg(kind="closed", max_concurrency=8), rec))
    first, second = sorted(done, key=lambda c: c.row.turn_id)
    assert first.result.end is not None and second.result.sent >= first.result.end
    generated = first.result.output_ids
    assert generated == [1003, 1004] and second.prompt == [*t1_in, *generated, 42]
    # The next turn was intended the moment the previous turn's last byte arrived.
    assert second.scheduled_s == first.result.end - first.t0


@pytest.mark.parametrize(("kind", "slots", "vacated"), [("closed", 3, 3), ("closed", 8, 5), ("poisson", 3, 0)])
def test_a_closed_loop_says_once_for_each_finish_it_sends_nothing_after(kind: str, slots: int, vacated: int) -> None:
    """Five sessions of three turns. In a closed loop every finish is followed by one send (its session's next
    turn, or a turn waiting for a slot) or by one vacate call, which the reference server's lockstep counts in
    place of a successor: so there are as many calls as slots that started, made only once nothing was waiting to
    be sent. A call too many lets the lockstep run ahead of a request still on its way; one too few costs its
    whole wait. An open loop has no lockstep and never calls."""
    rows = [TraceRow(s, t, 0.0, (s, t, 7), (0,) * (2 + (3 * s + t) % 4)) for s in range(5) for t in range(3)]
    rec = Recorder(0.005)
    finished: list[int] = []
    calls: list[tuple[int, int]] = []  # (finishes, sends) when each call came

    async def vacate() -> None:
        calls.append((len(finished), len(rec.prompts)))

    done = asyncio.run(serve_and_drive(rows, LoadCfg(kind=kind, max_concurrency=slots, request_rate=200.0), rec,
                                       lambda c: finished.append(c.index), vacate))
    assert len(done) == 15 and len(calls) == vacated
    for k, (finishes, sends) in enumerate(calls, 1):  # every finish so far accounted for by a send or a call
        assert sends - min(slots, 5) + k <= finishes


def to_records(done: list[Completed]) -> list[Record]:
    """Records the way the server engine builds them, so the summary's flag can be checked."""
    out = []
    for c in done:
        r = c.result

        def rel(t: float | None, t0: float = c.t0) -> float | None:
            return None if t is None else t - t0

        out.append(Record(run_id="r", trial_id="t", arm="a", workload="w", repeat=0, request_index=c.index,
                          session_id=c.row.session_id, turn_id=c.row.turn_id, scheduled_s=c.scheduled_s,
                          sent_s=rel(r.sent), first_token_s=rel(r.first_token), end_s=rel(r.end),
                          prompt_tokens=len(c.prompt), output_tokens=r.output_tokens, cached_tokens=r.cached_tokens,
                          status="ok" if r.status == "ok" else "error"))
    return out


STALL_MS = 30.0


def stall(_c: Completed) -> None:
    # A client busy in its own event loop (e.g. post-processing a completion): nothing can be sent meanwhile.
    end = time.perf_counter() + STALL_MS / 1e3
    while time.perf_counter() < end:
        pass


def test_closed_loop_counts_a_stalled_client_as_client_delay_and_flags_it() -> None:
    # One output token after 200 ms: TTFT ~200 ms, so a 30 ms stall is above the 10% flag line, and a delay
    # wrongly taken from the previous send (server time included) would be past the upper bound below.
    rows = [TraceRow(i, 0, 0.0, (1, 2, i), (0,)) for i in range(12)]
    done = asyncio.run(serve_and_drive(rows, LoadCfg(kind="closed", max_concurrency=2), Recorder(0.2), stall))
    assert all(c.result.status == "ok" for c in done)
    delays = {c.index: (c.result.sent - c.t0 - c.scheduled_s) * 1e3 for c in done}
    first_wave, rest = [delays[i] for i in (0, 1)], [delays[i] for i in range(2, 12)]
    assert max(first_wave) < STALL_MS  # nothing stalled before the first sends (a stall is >= STALL_MS)
    # Each later request waits at least for the stall after the completion that freed its slot, and at
    # most for both slots' stalls (plus scheduling slack): completions whose bytes arrived together are
    # handled one after the other, and the second slot was free from its last byte. The slack is wide
    # enough for a machine shared with other jobs (the test process loses the CPU now and then).
    assert all(STALL_MS <= d < 2 * STALL_MS + 90 for d in rest), rest
    summary = summarize(to_records(done))
    assert summary["p99_client_delay_ms"] >= STALL_MS and summary["client_delay_flagged"] is True


def test_closed_loop_without_a_stall_has_small_client_delay_and_no_flag() -> None:
    # TTFT ~200 ms puts the flag line at 20 ms: a test process that loses the CPU for a few ms to another test
    # worker (CI runs two) is not a stalled client, and STALL_MS (the stalled test's delay) is still above it.
    rows = [TraceRow(i, 0, 0.0, (1, 2, i), (0,)) for i in range(12)]
    done = asyncio.run(serve_and_drive(rows, LoadCfg(kind="closed", max_concurrency=2), Recorder(0.2)))
    summary = summarize(to_records(done))
    assert summary["completed"] == 12 and summary["median_ttft_ms"] >= 200
    assert 0 <= summary["p99_client_delay_ms"] < 20 < STALL_MS and summary["client_delay_flagged"] is False


@pytest.mark.parametrize("load", [LoadCfg(kind="poisson", request_rate=200.0, max_concurrency=2),
                                  LoadCfg(kind="trace", slowdown=0.01)])
def test_open_loops_still_intend_their_arrival_times(load: LoadCfg) -> None:
    rows = [TraceRow(i, 0, float(i), (1,), (1,)) for i in range(10)]

    async def send(prompt: list[int], n: int, answer_needed: bool) -> ClientResult:
        r = ClientResult(sent=time.perf_counter())
        await asyncio.sleep(0.005)
        r.first_token = r.end = time.perf_counter()
        return r

    done: list[Completed] = []
    asyncio.run(drive(rows, arrival_schedule(rows, plan_load(load), 3), send, lambda c: (done.append(c), stall(c))))
    want = intended_times(rows, load, 3)
    assert sorted((c.index, c.scheduled_s) for c in done) == list(enumerate(want))


@pytest.mark.parametrize("load", [LoadCfg(kind="poisson", request_rate=1000.0), LoadCfg(kind="trace", slowdown=0.001)])
def test_an_open_loops_next_turn_is_intended_when_its_previous_turn_ends(load: LoadCfg) -> None:
    # A session's next turn arrives (ms after its first) while the first is still decoding (~200 ms): it could not go
    # out before that turn's last byte, so that wait is the session's, not the client's. Counted as client delay it
    # flagged every multi-turn open-loop run ("the client fell behind its schedule") on a client that never lagged,
    # and disagreed with the simulator, which intends such a turn at max(arrival, previous end) too.
    rows = [TraceRow(s, t, float(t), (s, t, 7), (0,)) for s in range(4) for t in range(2)]
    done = asyncio.run(serve_and_drive(rows, load, Recorder(0.2)))
    assert len(done) == 8 and all(c.result.status == "ok" for c in done)
    want = intended_times(rows, load, 0)
    for c in done:
        if c.row.turn_id == 1:
            first = next(d for d in done if d.row.session_id == c.row.session_id and d.row.turn_id == 0)
            assert first.result.end is not None and want[c.index] < first.result.end - first.t0
            assert c.scheduled_s == first.result.end - first.t0
    summary = summarize(to_records(done))
    assert summary["median_ttft_ms"] >= 200 and summary["p99_client_delay_ms"] < 20
    assert summary["client_delay_flagged"] is False


def test_poisson_and_trace_arrivals_are_seeded_and_scaled() -> None:
    rows = [TraceRow(i, 0, 10.0 + i, (1,), (1,)) for i in range(200)]
    a = intended_times(rows, LoadCfg(kind="poisson", request_rate=4.0), seed=1)
    assert a == intended_times(rows, LoadCfg(kind="poisson", request_rate=4.0), seed=1)
    assert a[-1] / (len(a) - 1) == pytest.approx(0.25, rel=0.2)
    assert intended_times(rows, LoadCfg(kind="trace", slowdown=2.0), seed=0)[:3] == [0.0, 2.0, 4.0]


def test_an_error_inside_a_200_stream_is_recorded_as_an_error() -> None:
    async def failing(request: web.Request) -> web.StreamResponse:
        await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        first = {"text": "x", "meta_info": {"completion_tokens": 1}}
        await resp.write(f"data: {json.dumps(first)}\n\n".encode())
        await resp.write(f"data: {json.dumps({'error': {'message': 'Not enough space for mamba cache'}})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def go() -> tuple[str, str]:
        app = web.Application()
        app.router.add_post("/generate", failing)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            async with StreamPool(f"http://127.0.0.1:{port}") as pool:
                r = await generate_sglang(pool, [1, 2], 16, 10.0)
        finally:
            await runner.cleanup()
        return r.status, r.error

    status, error = asyncio.run(go())
    assert status == "error" and "Not enough space for mamba cache" in error


def test_a_sessions_next_turn_queues_behind_sessions_already_waiting() -> None:
    # One slot: A's second turn becomes ready when A's first ends, after B already waits: B goes first.
    rows = [TraceRow("A", 0, 0.0, (1,), (5,)), TraceRow("A", 1, 0.0, (1, 5, 2), (6,)),
            TraceRow("B", 0, 0.0, (3,), (7,))]
    sent: list[tuple[int, ...]] = []

    async def send(prompt: list[int], n: int, answer_needed: bool) -> ClientResult:
        sent.append(tuple(prompt))
        r = ClientResult(sent=time.perf_counter())
        await asyncio.sleep(0.002)
        r.first_token = r.end = time.perf_counter()
        r.output_ids = [40 + len(prompt)]
        return r

    done: list[Completed] = []
    asyncio.run(drive(rows, arrival_schedule(rows, plan_load(LoadCfg(kind="closed", max_concurrency=1)), 0),
                      send, done.append))
    assert sent == [(1,), (3,), (1, 41, 2)]  # A's turn 2 carries what the server generated (41), not 5
    # Each request was intended when the previous one's last byte arrived: the one slot was busy until then.
    ends = [c.result.end - c.t0 for c in done]  # type: ignore[operator]
    assert [c.scheduled_s for c in done] == [0.0, *ends[:-1]]


@pytest.mark.parametrize("a_ends_first", [True, False])
def test_a_closed_loop_fills_slots_freed_at_one_modelled_moment_the_same_way_whichever_stream_ends_first(
        a_ends_first: bool) -> None:
    # Two slots. A0 and B0 finish at one modelled moment (the reference server's lockstep), their streams ending in
    # either wall order; C0 has waited since the start. The freed slots take C0, then the older session's next
    # turn by trace order (A1): the same requests in the same order in every repeat, as the modelled clock says.
    rows = [TraceRow("A", 0, 0.0, (1,), (9,)), TraceRow("A", 1, 0.0, (2,), (9,)),
            TraceRow("B", 0, 0.0, (3,), (9,)), TraceRow("B", 1, 0.0, (4,), (9,)),
            TraceRow("C", 0, 0.0, (5,), (9,))]
    wall = {1: 0.01, 3: 0.02} if a_ends_first else {1: 0.02, 3: 0.01}  # the later requests take longer (0.1 s)
    sent: list[int] = []

    async def send(prompt: list[int], n: int, answer_needed: bool) -> ClientResult:
        sent.append(prompt[0])
        r = ClientResult(sent=time.perf_counter())
        await asyncio.sleep(wall.get(prompt[0], 0.1))
        r.first_token = r.end = time.perf_counter()
        r.modelled = (0.0, 0.5, 1.0 if prompt[0] in (1, 3) else 2.0)
        return r

    asyncio.run(drive(rows, arrival_schedule(rows, plan_load(LoadCfg(kind="closed", max_concurrency=2)), 0),
                      send, lambda c: None))
    assert sent == [1, 3, 5, 2, 4]


def test_a_send_that_raises_ends_the_drive_and_stops_the_other_slots() -> None:
    rows = [TraceRow(i, 0, 0.0, (i,), (1,)) for i in range(50)]
    sent: list[int] = []

    async def send(prompt: list[int], n: int, answer_needed: bool) -> ClientResult:
        sent.append(prompt[0])
        await asyncio.sleep(0.001 * (1 + prompt[0] % 3))
        if prompt[0] == 5:
            raise RuntimeError("a bug in a client")
        r = ClientResult(sent=time.perf_counter())
        r.first_token = r.end = time.perf_counter()
        return r

    async def go() -> None:
        await drive(rows, arrival_schedule(rows, plan_load(LoadCfg(kind="closed", max_concurrency=4)), 0),
                    send, lambda _c: None)

    with pytest.raises(RuntimeError, match="a bug in a client"):
        asyncio.run(go())
    assert 5 in sent and len(sent) < 20  # the other slots stopped instead of draining the trace


def test_the_heap_is_frozen_only_while_driving() -> None:
    # Objects alive before the drive (the trace, the plan) are out of the collector's reach while it runs.
    rows = [TraceRow(i, 0, 0.0, (i,), (1,)) for i in range(3)]
    seen: list[int] = []

    async def send(prompt: list[int], n: int, answer_needed: bool) -> ClientResult:
        r = ClientResult(sent=time.perf_counter())
        r.first_token = r.end = time.perf_counter()
        return r

    before = gc.get_freeze_count()
    asyncio.run(drive(rows, arrival_schedule(rows, plan_load(LoadCfg(kind="closed", max_concurrency=2)), 0),
                      send, lambda _c: seen.append(gc.get_freeze_count())))
    assert len(seen) == 3 and min(seen) > before and gc.get_freeze_count() == before


@pytest.mark.parametrize("loop", event_loop.EVENT_LOOPS)
def test_every_record_field_is_filled_from_the_stream(loop: event_loop.EventLoop) -> None:
    # Through the trial runner's own record path (outcome -> trial_record), over real HTTP, on both loops.
    if loop == "uvloop" and event_loop.default() != "uvloop":
        pytest.skip("uvloop is not installed (the fast extra)")
    rows = [TraceRow(i % 3, i // 3, 0.0, tuple(range(10 + i)), (0,) * 3) for i in range(9)]
    done = event_loop.run(serve_and_drive(rows, LoadCfg(kind="closed", max_concurrency=4), Recorder(0.002)), loop)
    trial = Trial(index=0, arm="radix", workload="w", repeat=1, seed=0)
    records = sorted((trial_record("run", trial, outcome(c), "cold-flushed") for c in done),
                     key=lambda r: r.request_index)
    assert [r.request_index for r in records] == list(range(9))
    for r, c in zip(records, sorted(done, key=lambda c: c.index), strict=True):
        assert (r.run_id, r.trial_id, r.arm, r.workload, r.repeat) == ("run", "000-w-radix-r1", "radix", "w", 1)
        assert (r.session_id, r.turn_id) == (rows[r.request_index].session_id, rows[r.request_index].turn_id)
        assert r.status == "ok" and r.error == "" and r.output_tokens == 3
        assert r.prompt_tokens == len(c.prompt) and r.cached_tokens == len(c.prompt) // 2
        assert r.sent_s is not None and r.first_token_s is not None and r.end_s is not None
        assert 0 <= r.scheduled_s <= r.sent_s < r.first_token_s <= r.end_s
        assert r.client_delay_ms is not None and 0 <= r.client_delay_ms < 1000
        assert len(r.itl_ms) == 2 and all(x >= 0 for x in r.itl_ms)  # chunks may arrive together under load
        assert r.ttft_ms == pytest.approx((r.first_token_s - r.sent_s) * 1e3)
        assert r.cache_state == "cold-flushed" and r.modelled is False
    # A session's later turn went out only after its previous turn's last byte.
    by_index = {c.index: c for c in done}
    for i in range(3, 9):
        prev = by_index[i - 3]
        assert by_index[i].result.sent >= prev.result.end  # type: ignore[operator]


@pytest.mark.parametrize("kind", ["closed", "poisson"])
def test_only_a_turn_with_a_next_turn_asks_for_its_answer(kind: str) -> None:
    # The answer's ids are what a session's next turn carries; a last turn (or a single-turn session) needs none,
    # and asking vLLM for them costs the prompt's echo inside the TTFT measured.
    rows = [TraceRow("a", 0, 0.0, (1,), (7,)), TraceRow("a", 1, 0.0, (1, 7, 2), (7,)),
            TraceRow("a", 2, 0.0, (1, 7, 2, 7, 3), (7,)), TraceRow("b", 0, 0.0, (2,), (7,))]
    asked: dict[tuple[object, int], bool] = {}

    async def send(prompt: list[int], n: int, answer_needed: bool) -> ClientResult:
        row = next(r for r in rows if list(r.input_tokens) == prompt)
        asked[(row.session_id, row.turn_id)] = answer_needed
        r = ClientResult(sent=time.perf_counter())
        r.first_token = r.end = time.perf_counter()
        return r

    load = LoadCfg(kind=kind, max_concurrency=2, request_rate=500.0)
    asyncio.run(drive(rows, arrival_schedule(rows, plan_load(load), 0), send, lambda _c: None))
    assert asked == {("a", 0): True, ("a", 1): True, ("a", 2): False, ("b", 0): False}


def test_a_next_turn_that_does_not_go_on_from_the_answer_does_not_ask_for_it() -> None:
    # Marconi's and SegLen's SWE-bench traces drop spans from the middle: such a next turn is sent as recorded, so the
    # answer's ids would be asked for (and vLLM's prompt echo paid inside TTFT) for nothing.
    rows = [TraceRow("a", 0, 0.0, (1, 2), (7,)), TraceRow("a", 1, 0.0, (1, 7, 9), (7,)),  # drops a span: not carried
            TraceRow("b", 0, 0.0, (3,), (8,)), TraceRow("b", 1, 0.0, (3, 8, 9), (8,))]  # goes on: carried
    asked: dict[tuple[object, int], bool] = {}

    async def send(prompt: list[int], n: int, answer_needed: bool) -> ClientResult:
        row = next(r for r in rows if list(r.input_tokens)[:1] == prompt[:1] and len(r.input_tokens) == len(prompt))
        asked[(row.session_id, row.turn_id)] = answer_needed
        r = ClientResult(sent=time.perf_counter())
        r.first_token = r.end = time.perf_counter()
        r.output_ids = [5]
        return r

    sent: list[list[int]] = []
    asyncio.run(drive(rows, arrival_schedule(rows, plan_load(LoadCfg(kind="closed", max_concurrency=1)), 0), send,
                      lambda c: sent.append(c.prompt)))
    assert asked == {("a", 0): False, ("a", 1): False, ("b", 0): True, ("b", 1): False}
    assert [3, 5, 9] in sent and [1, 7, 9] in sent  # b's generated answer carried; a's turn sent as recorded
