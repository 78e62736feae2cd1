"""The load driver: one asyncio loop, one task per session, following an arrival schedule, multi-turn causality.

Arrivals (intended send times) come from the trial's ``workloads.arrival.ArrivalSchedule``, the one the
simulator follows too: ``closed`` (all at 0, at most ``max_concurrency`` in flight, FIFO), ``poisson``
(bench_serving's exponential gap after each request), or ``trace`` (each row's ``ts`` × ``slowdown``).
A session's turn t+1 is sent only after turn t finished; when turn t+1's recorded input extends turn t's
input + recorded output, the output the server *actually* generated is substituted, so the server sees the
conversation it produced. Every request is timed against its intended send time, so the client's own delay is
measured and reported.

In a closed loop the intended send time is when the request *could* have gone out: the moment a slot
became free (the last byte of the request that held it arrived) or the request became ready (its
arrival; for a session's next turn, the previous turn's last byte), whichever is later. Taking it
after the slot is acquired instead would hide any lag of the client itself (a busy event loop), since
that lag also delays the acquisition.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from hybridbench.load.client import ClientResult
from workloads.arrival import ArrivalSchedule
from workloads.trace import TraceRow

__all__ = ["Completed", "drive"]

Send = Callable[[list[int], int], Awaitable[ClientResult]]


@dataclass(frozen=True, slots=True)
class Completed:
    index: int  # row index in the trace
    row: TraceRow
    prompt: list[int]  # what was actually sent
    scheduled_s: float  # intended send time, seconds after the trial start
    t0: float  # perf_counter() of the trial start
    result: ClientResult


def _next_prompt(prev_sent: list[int], prev: TraceRow, prev_out: list[int], row: TraceRow) -> list[int]:
    recorded_prefix = (*prev.input_tokens, *prev.output_tokens)
    if prev_out and row.input_tokens[: len(recorded_prefix)] == recorded_prefix:
        return [*prev_sent, *prev_out, *row.input_tokens[len(recorded_prefix):]]
    return list(row.input_tokens)


async def drive(
    rows: Sequence[TraceRow], schedule: ArrivalSchedule, send: Send, on_done: Callable[[Completed], None]
) -> None:
    if len(schedule.times_s) != len(rows):
        raise ValueError(f"the arrival schedule has {len(schedule.times_s)} times for {len(rows)} rows")
    times = schedule.times_s
    order = schedule.order()
    sessions: dict[int | str, list[int]] = defaultdict(list)
    for i in order:
        sessions[rows[i].session_id].append(i)
    for turns in sessions.values():
        turns.sort(key=lambda i: (rows[i].turn_id, i))
    limit = max(1, schedule.max_concurrency or len(rows))
    slots = asyncio.Semaphore(limit)
    # When each free slot became free (seconds after t0), as a min-heap: one entry per unheld slot, so
    # whoever acquires the semaphore pops one. The earliest is the first moment a slot was available.
    free_since: list[float] = [0.0] * limit
    t0 = time.perf_counter()

    async def run_session(turns: list[int]) -> None:
        prev: tuple[list[int], TraceRow, list[int]] | None = None
        ready = 0.0  # when the previous turn's last byte arrived, seconds after t0
        for i in turns:
            row = rows[i]
            delay = t0 + times[i] - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            prompt = list(row.input_tokens) if prev is None else _next_prompt(*prev, row)
            async with slots:
                freed = heapq.heappop(free_since)
                # Open loops intend their arrival times; a closed loop intends the moment both a slot
                # and this turn were ready, so client lag between then and now counts as delay.
                intended = max(freed, times[i], ready) if schedule.closed else times[i]
                try:
                    result = await send(prompt, max(1, len(row.output_tokens)))
                except BaseException:
                    heapq.heappush(free_since, time.perf_counter() - t0)
                    raise
                # The server was done at its last byte; a failure without one, when send returned.
                ready = (result.end if result.end is not None else time.perf_counter()) - t0
                heapq.heappush(free_since, ready)
            on_done(Completed(i, row, prompt, intended, t0, result))
            prev = (prompt, row, result.output_ids)

    # Start sessions in order of their first intended send, so FIFO slots follow trace order.
    firsts = sorted(sessions.values(), key=lambda t: (times[t[0]], t[0]))
    await asyncio.gather(*(run_session(t) for t in firsts))
