"""Arrival processes: schedules are pure, deterministic and keep multi-turn causality."""

from __future__ import annotations

import math
import random

import pytest

from workloads.arrival import (
    ClosedLoop,
    Dispatch,
    PoissonArrival,
    TraceTimestamps,
    build_schedule,
    simulate,
)
from workloads.errors import WorkloadError
from workloads.trace import TraceRow


def _row(sid: int, tid: int, ts: float = 0.0) -> TraceRow:
    return TraceRow(sid, tid, ts, (sid, tid), (1,))


def _multi_turn_rows(sessions: int, turns: int) -> list[TraceRow]:
    return [_row(s, t, s * 1.0 + t * 10.0) for s in range(sessions) for t in range(turns)]


def _check_causality(rows: list[TraceRow], dispatches: tuple[Dispatch, ...]) -> None:
    finish = {(rows[d.index].session_id, rows[d.index].turn_id): d.finish_s for d in dispatches}
    for d in dispatches:
        r = rows[d.index]
        if r.turn_id > 0:
            assert d.send_s >= finish[(r.session_id, r.turn_id - 1)]


def test_closed_loop_caps_concurrency_and_keeps_turn_order() -> None:
    rows = _multi_turn_rows(6, 3)
    rng = random.Random(0)
    durations = [rng.uniform(0.5, 2.0) for _ in rows]
    out = simulate(build_schedule(rows, ClosedLoop(2)), durations)
    _check_causality(rows, out)
    events = sorted([(d.send_s, 1) for d in out] + [(d.finish_s, -1) for d in out], key=lambda e: (e[0], e[1]))
    in_flight = peak = 0
    for _, delta in events:
        in_flight += delta
        peak = max(peak, in_flight)
    assert peak == 2
    assert min(d.send_s for d in out) == 0.0
    # Work-conserving: with 2 slots and 18 requests the makespan is at least half the total work.
    assert max(d.finish_s for d in out) >= sum(durations) / 2


def test_closed_loop_small_example_by_hand() -> None:
    rows = [_row(0, 0), _row(0, 1), _row(1, 0)]
    out = simulate(build_schedule(rows, ClosedLoop(1)), [1.0, 1.0, 5.0])
    assert [(d.send_s, d.finish_s) for d in out] == [(0.0, 1.0), (6.0, 7.0), (1.0, 6.0)]
    out2 = simulate(build_schedule(rows, ClosedLoop(2)), [1.0, 1.0, 5.0])
    assert [(d.send_s, d.finish_s) for d in out2] == [(0.0, 1.0), (1.0, 2.0), (0.0, 5.0)]


def test_poisson_sessions_arrive_at_rate_and_later_turns_wait() -> None:
    rows = _multi_turn_rows(2000, 2)
    schedule = build_schedule(rows, PoissonArrival(rate=4.0), seed=1)
    starts = [r.release_s for r in schedule.requests if r.after is None]
    assert starts == sorted(starts) and starts[0] == 0.0
    mean_gap = starts[-1] / (len(starts) - 1)
    assert 0.23 < mean_gap < 0.27
    assert all(r.after is not None and rows[r.after].turn_id == 0 for r in schedule.requests if r.turn_id == 1)
    assert schedule == build_schedule(rows, PoissonArrival(rate=4.0), seed=1)
    assert schedule != build_schedule(rows, PoissonArrival(rate=4.0), seed=2)
    burst = build_schedule(rows, PoissonArrival(rate=math.inf))
    assert {r.release_s for r in burst.requests} == {0.0}
    out = simulate(build_schedule(rows[:40], PoissonArrival(rate=2.0, max_concurrency=3), seed=0), [1.5] * 40)
    _check_causality(rows[:40], out)


def test_trace_timestamps_with_slowdown() -> None:
    rows = [_row(0, 0, 100.0), _row(1, 0, 101.0), _row(0, 1, 103.0)]
    schedule = build_schedule(rows, TraceTimestamps(slowdown=2.0))
    assert [r.release_s for r in schedule.requests] == [0.0, 2.0, 6.0]
    out = simulate(schedule, [10.0, 1.0, 1.0])
    assert out[2].send_s == 10.0  # its timestamp says 6 s, but turn 0 only finishes at 10 s
    assert out[1].send_s == 2.0


def test_bad_inputs() -> None:
    with pytest.raises(WorkloadError):
        ClosedLoop(0)
    with pytest.raises(WorkloadError):
        PoissonArrival(rate=0.0)
    with pytest.raises(WorkloadError):
        TraceTimestamps(slowdown=-1.0)
    with pytest.raises(WorkloadError, match="twice"):
        build_schedule([_row(0, 0), _row(0, 0)], ClosedLoop(1))
    with pytest.raises(WorkloadError, match="durations"):
        simulate(build_schedule([_row(0, 0)], ClosedLoop(1)), [1.0, 2.0])
