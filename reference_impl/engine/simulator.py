"""Discrete-event simulation of a serving run: clients, the engine core, and a cost model for time.

Time is an exact integer count of nanoseconds, so runs are bit-for-bit repeatable; the only
randomness is the Poisson arrival process, drawn when the schedule is built (``workloads.arrival``). The loop is
SGLang's: the engine runs one forward at a time (prefill or decode); requests that arrive while it
runs join the queue at the next step.

Clients follow the arrival schedule the load driver also follows (``workloads.arrival``: ``closed``,
``poisson`` per request, ``trace``), with at most ``max_concurrency`` in flight. In every mode a
session's turn t+1 is sent only after turn t finished; a failed turn ends its session (its later turns are
recorded as ``skipped``, never sent), as the driver's clients do.

The sampled tokens are the trace's recorded outputs, so multi-turn inputs stay consistent with what
the engine generated. Outputs are *modelled*, not measured: every number this produces is a
statement about the cost model, not about a GPU.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from reference_impl.engine.core import Batch, EngineCore, EngineRequest
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.decode_run import DecodeRun, plan_run
from workloads.arrival import ArrivalSchedule
from workloads.bench_serving import ServedTiming
from workloads.trace import TraceRow

__all__ = ["RequestRecord", "SimResult", "StepRecord", "simulate"]

NS = 1_000_000_000


class BatchTimer(Protocol):
    def batch_seconds(self, batch: Batch) -> float: ...

    def frontend_seconds(self, prompt_tokens: int) -> float:
        """Time from a client's send to the scheduler seeing the request (HTTP, tokenization, IPC)."""
        ...

    def host_transfer_seconds(self, tokens: int, states: int) -> float:
        """Host -> device copy of KV tokens and states (load-back before a prefill)."""
        ...


@dataclass(slots=True)
class RequestRecord(ServedTiming):
    rid: int
    session_id: int | str
    turn_id: int
    scheduled_s: float
    sent_s: float | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    retractions: int = 0
    status: Literal["ok", "error", "skipped", "pending"] = "pending"
    error: str = ""
    itl_ms: list[float] = field(default_factory=list)
    row_index: int = -1  # position in the trace as given (rid follows send order for trace arrivals)


@dataclass(frozen=True, slots=True)
class StepRecord:
    end_s: float
    kind: str
    num_requests: int
    num_tokens: int
    kv_used: int
    states_used: int
    retractions: int  # cumulative


@dataclass(frozen=True, slots=True)
class SimResult:
    records: tuple[RequestRecord, ...]
    steps: tuple[StepRecord, ...]
    duration_s: float
    retractions: int
    aborted: int
    peak_kv_used: int
    peak_states_used: int
    kv_pool_tokens: int
    state_pool_slots: int


def _host_loads(core: EngineCore) -> tuple[int, int]:
    if core.host is None:
        return (0, 0)
    c = core.host.counters
    return (c.load_back_tokens, c.load_back_states)


def simulate(rows: Sequence[TraceRow], core: EngineCore, timer: BatchTimer, arrival: ArrivalSchedule,
             *, decode_runs: bool = True) -> SimResult:
    """Serve ``rows`` as ``arrival`` (``workloads.arrival``, built from the trace in the rows' order) sends them.

    ``decode_runs``: apply runs of unchanged decode steps at once (``engine.decode_run``) when the timer can time
    a step from its size alone (``CostModel``); the result is the same as stepping singly (``False``), only faster."""
    if len(arrival.times_s) != len(rows):
        raise ValueError(f"the arrival schedule has {len(arrival.times_s)} times for {len(rows)} rows")
    order = arrival.order()
    earliest = [round(arrival.times_s[i] * NS) for i in order]
    rows = [rows[i] for i in order]
    records = [
        RequestRecord(i, r.session_id, r.turn_id, earliest[i] / NS, row_index=order[i]) for i, r in enumerate(rows)
    ]
    # A turn waits for the previous turn of its session; the first turn of each session is free.
    prev_turn: dict[int, int] = {}
    last_of_session: dict[int | str, int] = {}
    for i, r in enumerate(rows):
        if r.session_id in last_of_session:
            prev_turn[i] = last_of_session[r.session_id]
        last_of_session[r.session_id] = i
    next_turn = {p: i for i, p in prev_turn.items()}
    cap = arrival.max_concurrency or len(rows)
    ready: list[tuple[int, int]] = []  # (send time ns, row index): causality satisfied
    for i in range(len(rows)):
        if i not in prev_turn:
            heapq.heappush(ready, (earliest[i], i))
    # When each concurrency slot last became free: a request is sent the moment it is ready *and* a
    # slot is free, even while the engine is in the middle of a forward.
    free_slots = [0] * min(cap, len(rows))
    now = 0
    by_rid: dict[int, EngineRequest] = {}
    last_token_ns: dict[int, int] = {}
    steps: list[StepRecord] = []
    done = 0

    def release(i: int, at: int) -> None:
        j = next_turn.get(i)
        if j is not None:
            heapq.heappush(ready, (max(earliest[j], at), j))

    def finish(i: int, at: int, status: Literal["ok", "error"], error: str = "") -> None:
        nonlocal done
        rec = records[i]
        rec.end_s, rec.status, rec.error = at / NS, status, error
        heapq.heappush(free_slots, at)
        done += 1
        if status == "ok":
            release(i, at)
            return
        # A failed turn ends its session, as the load driver has it (hybridbench/load/driver.py): the next turn
        # would re-send an answer the server never gave. Each later turn is recorded once, never sent.
        why = f"not sent: turn {rec.turn_id} of session {rec.session_id!r} failed (error)"
        j = next_turn.get(i)
        while j is not None:
            records[j].status, records[j].error = "skipped", why
            done += 1
            j = next_turn.get(j)

    def sample(req: EngineRequest, k: int) -> list[int]:
        """The next ``k`` tokens ``req`` samples: the trace's recorded outputs (0 past their end)."""
        out = rows[req.rid].output_tokens
        have = len(req.output)
        return [*out[have:have + k], *([0] * max(0, have + k - len(out)))]

    # Runs need a step's time from its size alone: CostModel's, whose batch_seconds is that same formula (a timer
    # that overrides batch_seconds would time a run differently from its single steps).
    step_timer = timer if decode_runs and isinstance(timer, CostModel) and \
        type(timer).batch_seconds is CostModel.batch_seconds else None
    arriving: list[tuple[int, int]] = []  # (ns the scheduler sees it, row index)

    def send_due(now: int) -> None:
        """Clients send every request whose time has come, up to the concurrency cap, in trace order."""
        while ready and ready[0][0] <= now and free_slots:
            ready_at, i = heapq.heappop(ready)
            sent = max(ready_at, heapq.heappop(free_slots))
            rec = records[i]
            rec.sent_s, rec.prompt_tokens = sent / NS, len(rows[i].input_tokens)
            # A closed loop intends to send when a slot frees; an open loop when the request is due.
            rec.scheduled_s = (sent if arrival.closed else ready_at) / NS
            latency = round(timer.frontend_seconds(len(rows[i].input_tokens)) * NS)
            heapq.heappush(arriving, (sent + latency, i))

    def take_run(run: DecodeRun, now: int, timer: CostModel) -> int:
        """Take the run's steps until one cannot be taken as a single step would be, or a request arrives."""
        ends: list[int] = []
        gaps: list[float] = []

        def record(req: EngineRequest) -> None:
            rec = records[req.rid]
            rec.itl_ms.append((ends[0] - last_token_ns[req.rid]) / 1e6)
            rec.itl_ms.extend(gaps)
            last_token_ns[req.rid] = ends[-1]
            rec.output_tokens = len(req.output)

        states = run.core.tree.state_pool
        while (shape := run.take()) is not None:
            seconds = timer.decode_step_seconds(shape.batch_size, shape.context_tokens, shape.state_copies)
            now += max(1, round(seconds * NS))
            if ends:
                gaps.append((now - ends[-1]) / 1e6)
            ends.append(now)
            for req in run.finish_due(sample):
                record(req)
                finish(req.rid, now, "ok")
            steps.append(StepRecord(now / NS, "decode", shape.batch_size, shape.batch_size, run.kv_used(),
                                    states.size - states.available, run.core.counters.retractions))
            # The single-step loop's top, at this step's end: sends; an arrival ends the run (a prefill is due).
            send_due(now)
            if arriving and arriving[0][0] <= now:
                break
        run.close(sample)
        for req in run.active:
            record(req)
        return now

    while done < len(rows):
        send_due(now)
        while arriving and arriving[0][0] <= now:
            _, i = heapq.heappop(arriving)
            row = rows[i]
            req = core.add_request(i, row.input_tokens, max(1, len(row.output_tokens)))
            if req.status == "aborted":
                finish(i, now, "error", req.error)
                continue
            by_rid[i] = req
        if done == len(rows):  # the last requests were rejected on arrival
            break
        run = plan_run(core) if step_timer is not None else None
        if run is not None and run.steps_possible():
            assert step_timer is not None
            now = take_run(run, now, step_timer)
            continue
        loaded, copies = _host_loads(core), core.strategy.counters.state_copies
        batch = core.schedule()
        if batch is None:
            if core.running or core.chunked:
                raise RuntimeError("engine core has running requests but scheduled nothing")
            upcoming = [t for t, _ in arriving[:1]] + ([ready[0][0]] if ready and free_slots else [])
            if upcoming:
                now = max(now, min(upcoming))  # idle until the next send or arrival
                continue
            if core.waiting:  # nothing runs, nothing arrives: the head request can never fit
                req = core.waiting.popleft()
                req.status, req.error = "aborted", "request cannot be admitted with the configured pools"
                core.counters.aborted += 1
                finish(req.rid, now, "error", req.error)
                continue
            raise RuntimeError("simulation stalled with requests outstanding")
        tokens_in, states_in = (a - b for a, b in zip(_host_loads(core), loaded, strict=True))
        sampled = []
        for item in batch.items:
            req = item.request
            if batch.kind == "decode" or (req.cached is not None and item.end == req.cached.input_len):
                out = rows[req.rid].output_tokens
                sampled.append(out[len(req.output)] if len(req.output) < len(out) else 0)
        newly: list[EngineRequest] = [
            i.request for i in batch.items if batch.kind == "decode" or i.end == i.request.cached.input_len  # type: ignore[union-attr]
        ]
        finished = core.complete(batch, sampled)
        # The state copies this forward made (admission COW, chunk checkpoints, track writes) are known only
        # now; they are charged to this step (no_buffer's post-forward fork delays the next one by as much).
        timed = replace(batch, state_copies=core.strategy.counters.state_copies - copies)
        # Load-back is synchronous with the prefill that needs it; write-back overlaps compute.
        seconds = timer.batch_seconds(timed) + (timer.host_transfer_seconds(tokens_in, states_in) if tokens_in else 0.0)
        now += max(1, round(seconds * NS))
        for req in newly:
            rec = records[req.rid]
            if rec.first_token_s is None:
                rec.first_token_s = now / NS
                rec.cached_tokens = req.cached_tokens or 0
            elif req.rid in last_token_ns:
                rec.itl_ms.append((now - last_token_ns[req.rid]) / 1e6)
            last_token_ns[req.rid] = now
            rec.output_tokens = len(req.output)
            rec.retractions = req.retractions
        for req in finished:
            finish(req.rid, now, "ok")
        tree = core.tree
        steps.append(
            StepRecord(
                now / NS,
                batch.kind,
                len(batch.items),
                batch.num_tokens,
                tree.kv_pool.size - tree.kv_pool.available,
                tree.state_pool.size - tree.state_pool.available,
                core.counters.retractions,
            )
        )
    return SimResult(
        records=tuple(records),
        steps=tuple(steps),
        duration_s=now / NS,
        retractions=core.counters.retractions,
        aborted=core.counters.aborted,
        peak_kv_used=core.counters.peak_kv_used,
        peak_states_used=core.counters.peak_states_used,
        kv_pool_tokens=core.tree.kv_pool.size,
        state_pool_slots=core.tree.state_pool.size,
    )
