"""The load driver: one asyncio loop, one worker per concurrency slot, an arrival schedule, multi-turn causality.

Arrivals (intended send times) come from the trial's ``workloads.arrival.ArrivalSchedule``, the one the
simulator follows too: ``closed`` (all at 0, at most ``max_concurrency`` in flight, the turn ready longest
first), ``poisson``
(bench_serving's exponential gap after each request), or ``trace`` (each row's ``ts`` × ``slowdown``).
A session's turn t+1 is sent only after turn t finished; when turn t+1's recorded input extends turn t's
input + recorded output, the output the server *actually* generated is substituted, so the server sees the
conversation it produced. Every request is timed against its intended send time (its arrival; a later turn's no
earlier than the previous turn's last byte), so the client's own delay is measured and reported.

A turn that fails (an HTTP error, an error in the stream, a timeout, a dropped connection) ends its session, as it
ends a real client's conversation: each later turn would re-send the conversation with an answer the server never
gave (the trace's, or a partial one), so its hit and TTFT would measure a request no client sends. Those turns are
not sent; each is reported once, as a ``skipped`` result naming the failed turn, so every planned request is
accounted for.

In a closed loop the intended send time is when the request *could* have gone out: the moment a slot
became free (the last byte of the request that held it arrived) or the request became ready (its
arrival; for a session's next turn, the previous turn's last byte), whichever is later. Taking it
after the slot is acquired instead would hide any lag of the client itself (a busy event loop), since
that lag also delays the acquisition.

Each slot is a worker task that sends a turn, waits for its last byte, records it and takes the next
ready turn (the one ready longest, ties in trace order) at once: no task per request and no semaphore hand-off
between one request's end and the next one's start, which at hundreds of streams was a large part of the client's
CPU per request.

A closed loop given ``vacate`` calls it once for each finished request it will send nothing in place of (a
session's last turn, or a failed turn that ended its session, with no other turn ready): the reference server's
modelled lockstep then stops waiting for a successor that is not coming, instead of for its whole wait. Only a
request the server finished is one it awaits a successor for (``ClientResult.server_finished``): a refused,
aborted or cut-short one is not vacated, since a call too many would let the lockstep run ahead of a request on
its way.
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from hybridbench.load.client import ClientResult
from workloads.arrival import ArrivalSchedule
from workloads.trace import TraceRow

__all__ = ["Completed", "Vacate", "drive"]

# (prompt, max new tokens, whether the answer's ids are needed: the session's next turn carries them)
Send = Callable[[list[int], int, bool], Awaitable[ClientResult]]
Vacate = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Completed:
    index: int  # row index in the trace
    row: TraceRow
    prompt: list[int]  # what was actually sent ([] for a turn not sent)
    scheduled_s: float  # intended send time, seconds after the trial start (a turn not sent: its arrival time)
    t0: float  # perf_counter() of the trial start
    result: ClientResult


def _extends(prev: TraceRow, row: TraceRow) -> bool:
    """Whether ``row``'s recorded input goes on from ``prev``'s input and recorded answer: the turn that is sent with
    the answer the server generated in place of the recorded one."""
    n, m = len(prev.input_tokens), len(prev.output_tokens)
    return (len(row.input_tokens) >= n + m and row.input_tokens[:n] == prev.input_tokens
            and row.input_tokens[n:n + m] == prev.output_tokens)


def _next_prompt(prev_sent: list[int], prev: TraceRow, prev_out: list[int], row: TraceRow, *,
                 extends: bool) -> list[int]:
    if prev_out and extends:
        return [*prev_sent, *prev_out, *row.input_tokens[len(prev.input_tokens) + len(prev.output_tokens):]]
    return list(row.input_tokens)


# A turn waiting to be sent: its session's row indices, its position there, when it became ready (the
# previous turn's last byte, seconds after t0; 0 for a first turn) and what the previous turn sent and got.
_Turn = tuple[list[int], int, float, "tuple[list[int], TraceRow, list[int]] | None"]


async def drive(
    rows: Sequence[TraceRow], schedule: ArrivalSchedule, send: Send, on_done: Callable[[Completed], None],
    vacate: Vacate | None = None,
) -> None:
    if len(schedule.times_s) != len(rows):
        raise ValueError(f"the arrival schedule has {len(schedule.times_s)} times for {len(rows)} rows")
    times = schedule.times_s
    sessions: dict[int | str, list[int]] = defaultdict(list)
    for i in schedule.order():
        sessions[rows[i].session_id].append(i)
    for turns in sessions.values():
        turns.sort(key=lambda i: (rows[i].turn_id, i))
    # The turns whose answer the next turn carries (compared once, before the clock starts): only those ask for the
    # generated ids (vLLM echoes the prompt's ids with them, inside the TTFT measured).
    carried = {a for turns in sessions.values() for a, b in pairwise(turns)
               if _extends(rows[a], rows[b])}
    # Start sessions in order of their first intended send, so slots follow trace order.
    firsts = sorted(sessions.values(), key=lambda t: (times[t[0]], t[0]))
    loop = asyncio.get_running_loop()
    clock = time.perf_counter
    closed = schedule.closed
    # Turns whose arrival has come, first by when each became ready, then in trace order: (ready at, row, turn).
    # A closed loop on the modelled clock (the reference server's lockstep) gives several finishes one modelled
    # moment, whose HTTP streams end in a race; taking the oldest *modelled* ready turn, ties in trace order,
    # makes which turns fill the freed slots the same in every repeat (FIFO by wall order did not).
    ready: list[tuple[float, int, _Turn]] = []
    idle: deque[asyncio.Future[_Turn | None]] = deque()  # workers waiting for a turn, longest first
    left = len(rows)  # turns not yet taken by a worker nor skipped
    t0 = clock()

    def put(turn: _Turn, ready_at: float) -> None:
        while idle:
            fut = idle.popleft()
            if not fut.done():
                fut.set_result(turn)
                return
        heapq.heappush(ready, (ready_at, turn[0][turn[1]], turn))

    def taken(n: int) -> None:
        # n more turns are accounted for (sent, or skipped): once none is left, the idle workers are released.
        nonlocal left
        left -= n
        if not left:
            while idle:
                if not (fut := idle.popleft()).done():
                    fut.set_result(None)

    def skip(turns: list[int], failed: TraceRow, result: ClientResult) -> None:
        why = f"not sent: turn {failed.turn_id} of session {failed.session_id!r} failed ({result.status})"
        for j in turns:
            on_done(Completed(j, rows[j], [], times[j], t0, ClientResult(sent=None, status="skipped", error=why)))
        taken(len(turns))

    def put_at(turn: _Turn, at_s: float, ready_at: float) -> None:
        delay = t0 + at_s - clock()
        if delay > 0:
            loop.call_later(delay, put, turn, max(at_s, ready_at))
        else:
            put(turn, max(at_s, ready_at))

    async def feed() -> None:
        for turns in firsts:
            delay = t0 + times[turns[0]] - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            put((turns, 0, 0.0, None), times[turns[0]])

    async def worker() -> None:
        # A worker is one slot: it sends a turn, waits for its last byte, records it and takes the next ready
        # turn at once, with no task per request and no semaphore hand-off between them.
        freed = 0.0  # when this slot became free: the last byte of its previous request, seconds after t0
        ended = False  # this slot's last request ended its session: nothing follows it unless a turn is ready
        while True:
            if ended and not ready and vacate is not None:
                # Each finish is followed by one send (its next turn, or a ready turn this slot takes) or, here,
                # by none: the server is told so, one call per finish without a successor.
                ended = False
                await vacate()
                continue  # a turn may have become ready meanwhile
            ended = False
            if ready:
                turn = heapq.heappop(ready)[2]
            elif not left:
                return
            else:
                fut: asyncio.Future[_Turn | None] = loop.create_future()
                idle.append(fut)
                got = await fut
                if got is None:
                    return
                turn = got
            taken(1)
            turns, k, prev_end, prev = turn
            i = turns[k]
            row = rows[i]
            prompt = (list(row.input_tokens) if prev is None
                      else _next_prompt(*prev, row, extends=turns[k - 1] in carried))
            # Open loops intend their arrival times, a session's later turn no earlier than its previous turn's
            # last byte (that wait is the session's, not client lag; the simulator intends it so too); a closed loop
            # intends the moment both a slot and this turn were ready, so client lag between then and now counts.
            intended = max(freed, times[i], prev_end) if closed else max(times[i], prev_end)
            more = k + 1 < len(turns)
            result = await send(prompt, max(1, len(row.output_tokens)), i in carried)
            # The server was done at its last byte; a failure without one, when send returned.
            freed = (result.end if result.end is not None else clock()) - t0
            if more and result.status == "ok":
                # Ready when this turn finished: on the modelled clock when the server keeps one (closed loops).
                finished = result.modelled[2] if closed and result.modelled is not None else freed
                put_at((turns, k + 1, freed, (prompt, row, result.output_ids)), times[turns[k + 1]], finished)
            else:
                # The session ends here: its last turn, or a failed one. Only a finish the server counted is vacated:
                # a refused or aborted request it never counted must not be, and the safe side is cheap (a finish
                # left unsaid costs one lockstep wait).
                ended = closed and result.server_finished
            on_done(Completed(i, row, prompt, intended, t0, result))
            if more and result.status != "ok":
                skip(turns[k + 1:], row, result)

    limit = min(schedule.max_concurrency or len(rows), len(rows))
    tasks = [loop.create_task(feed()), *(loop.create_task(worker()) for _ in range(limit))]
    # Everything alive now (the trace, the plan, imported modules) outlives the drive: frozen, the
    # collector stops re-scanning it, so its full collections stop pausing the loop mid-trial.
    gc.freeze()
    try:
        await asyncio.gather(*tasks)
    finally:
        gc.unfreeze()
        for task in tasks:  # a failed worker ends the drive: the others stop rather than run on
            task.cancel()
