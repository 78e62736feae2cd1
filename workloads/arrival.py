"""Arrival processes: when each request of a trace may be sent, as pure schedule computations.

Three processes (DESIGN.md §1 "load"):

* ``ClosedLoop(max_concurrency)``: every session is ready at t=0; at most N requests in flight;
* ``PoissonArrival(rate)``: sessions arrive with exponential gaps of mean ``1/rate`` (SGLang's
  ``--request-rate``; ``inf`` = all at 0), optionally capped by ``max_concurrency`` (SGLang's semaphore);
* ``TraceTimestamps(slowdown)``: each request is released at ``(ts - first ts) * slowdown`` (Mooncake's
  ``--mooncake-slowdown-factor``), optionally capped by ``max_concurrency``.

In every process turn t+1 of a session is sent only after turn t finished (multi-turn causality).
``build_schedule`` turns a trace + process into ``ScheduledRequest`` constraints; ``simulate`` applies
them to given service times (from a simulator, or a model) and returns each request's send and finish
times; the load driver applies the same constraints to a live server.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from workloads.errors import WorkloadError, require
from workloads.trace import TraceRow

__all__ = [
    "ArrivalProcess",
    "ClosedLoop",
    "Dispatch",
    "PoissonArrival",
    "Schedule",
    "ScheduledRequest",
    "TraceTimestamps",
    "build_schedule",
    "simulate",
]


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    max_concurrency: int

    def __post_init__(self) -> None:
        require(self.max_concurrency >= 1, f"max_concurrency must be >= 1, got {self.max_concurrency}")


@dataclass(frozen=True, slots=True)
class PoissonArrival:
    rate: float  # sessions per second; math.inf sends every session at t=0
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        require(self.rate > 0 and not math.isnan(self.rate), f"rate must be > 0 or inf, got {self.rate}")
        require(self.max_concurrency is None or self.max_concurrency >= 1, "max_concurrency must be >= 1")


@dataclass(frozen=True, slots=True)
class TraceTimestamps:
    slowdown: float = 1.0
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        ok = math.isfinite(self.slowdown) and self.slowdown >= 0
        require(ok, f"slowdown must be a finite number >= 0, got {self.slowdown}")
        require(self.max_concurrency is None or self.max_concurrency >= 1, "max_concurrency must be >= 1")


ArrivalProcess = ClosedLoop | PoissonArrival | TraceTimestamps


@dataclass(frozen=True, slots=True)
class ScheduledRequest:
    """Send row ``index`` no earlier than ``release_s``, and only once row ``after`` (if any) finished."""

    index: int
    session_id: int | str
    turn_id: int
    release_s: float
    after: int | None


@dataclass(frozen=True, slots=True)
class Schedule:
    requests: tuple[ScheduledRequest, ...]  # in trace order; requests[i].index == i
    max_concurrency: int | None


@dataclass(frozen=True, slots=True)
class Dispatch:
    index: int
    ready_s: float  # released and its previous turn finished
    send_s: float  # ready and a concurrency slot free
    finish_s: float


def _previous_turns(rows: Sequence[TraceRow]) -> list[int | None]:
    by_session: dict[int | str, list[tuple[int, int]]] = {}
    for i, row in enumerate(rows):
        by_session.setdefault(row.session_id, []).append((row.turn_id, i))
    after: list[int | None] = [None] * len(rows)
    for sid, turns in by_session.items():
        turns.sort()
        for (t_prev, i_prev), (t, i) in itertools.pairwise(turns):
            if t == t_prev:
                raise WorkloadError(f"session {sid!r} has turn {t} twice (rows {i_prev} and {i})")
            after[i] = i_prev
    return after


def build_schedule(rows: Sequence[TraceRow], process: ArrivalProcess, seed: int = 0) -> Schedule:
    """Release times and turn dependencies of every row; deterministic given ``seed``."""
    after = _previous_turns(rows)
    release = [0.0] * len(rows)
    if isinstance(process, PoissonArrival):
        rng = random.Random(seed)
        clock = 0.0
        session_start: dict[int | str, float] = {}
        for row in rows:  # sessions arrive in order of first appearance
            if row.session_id not in session_start:
                session_start[row.session_id] = clock
                if math.isfinite(process.rate):
                    clock += rng.expovariate(process.rate)
        release = [session_start[row.session_id] if after[i] is None else 0.0 for i, row in enumerate(rows)]
    elif isinstance(process, TraceTimestamps) and rows:
        t0 = min(row.ts for row in rows)
        release = [(row.ts - t0) * process.slowdown for row in rows]
    requests = tuple(
        ScheduledRequest(i, row.session_id, row.turn_id, release[i], after[i]) for i, row in enumerate(rows)
    )
    return Schedule(requests, process.max_concurrency)


def simulate(schedule: Schedule, durations: Sequence[float]) -> tuple[Dispatch, ...]:
    """Send and finish times given each request's service time (FIFO among ready requests by time, index)."""
    reqs = schedule.requests
    require(len(durations) == len(reqs), f"{len(durations)} durations for {len(reqs)} requests")
    require(all(d >= 0 for d in durations), "durations must be >= 0")
    children: dict[int, list[int]] = {}
    ready: list[tuple[float, int]] = []
    for r in reqs:
        if r.after is None:
            heapq.heappush(ready, (r.release_s, r.index))
        else:
            children.setdefault(r.after, []).append(r.index)
    slots = schedule.max_concurrency if schedule.max_concurrency is not None else len(reqs) + 1
    running: list[tuple[float, int]] = []
    out: dict[int, Dispatch] = {}
    now = 0.0
    while ready or running:
        if ready and len(running) < slots and (not running or ready[0][0] <= running[0][0]):
            ready_s, i = heapq.heappop(ready)
            now = max(now, ready_s)
            finish = now + durations[i]
            out[i] = Dispatch(i, ready_s, now, finish)
            heapq.heappush(running, (finish, i))
            continue
        finish, i = heapq.heappop(running)
        now = max(now, finish)
        for child in children.get(i, ()):
            heapq.heappush(ready, (max(reqs[child].release_s, finish), child))
    if len(out) != len(reqs):
        raise WorkloadError("the schedule has a dependency cycle; some requests never became ready")
    return tuple(out[i] for i in range(len(reqs)))
