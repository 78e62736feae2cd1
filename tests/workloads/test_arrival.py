"""The one arrival schedule: pure, deterministic, Poisson per request (as bench_serving), the same for the client
driver and the simulator."""

from __future__ import annotations

import math

import pytest

from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import Batch, EngineCore
from reference_impl.engine.simulator import simulate
from workloads.arrival import LoadSpec, arrival_schedule
from workloads.trace import TraceRow


def _row(sid: int, tid: int, ts: float = 0.0) -> TraceRow:
    return TraceRow(sid, tid, ts, (sid + 1, tid + 1, 7), (1,))


def test_poisson_is_per_request_at_the_rate_and_seeded() -> None:
    # Two turns per session: bench_serving draws a gap after every request, not once per session.
    rows = [_row(s, t) for s in range(1000) for t in range(2)]
    schedule = arrival_schedule(rows, LoadSpec("poisson", request_rate=4.0), seed=1)
    times = schedule.times_s
    assert times[0] == 0.0 and list(times) == sorted(times) and len(set(times)) == len(rows)
    assert times[-1] / (len(rows) - 1) == pytest.approx(0.25, rel=0.1)
    assert schedule == arrival_schedule(rows, LoadSpec("poisson", request_rate=4.0), seed=1)
    assert schedule != arrival_schedule(rows, LoadSpec("poisson", request_rate=4.0), seed=2)
    assert set(arrival_schedule(rows, LoadSpec("poisson", request_rate=math.inf)).times_s) == {0.0}


def test_trace_and_closed_schedules() -> None:
    rows = [_row(0, 0, 100.0), _row(1, 0, 101.5), _row(0, 1, 103.0)]
    trace = arrival_schedule(rows, LoadSpec("trace", slowdown=2.0, max_concurrency=2))
    assert trace.times_s == (0.0, 3.0, 6.0) and trace.max_concurrency == 2 and not trace.closed
    closed = arrival_schedule(rows, LoadSpec("closed", max_concurrency=1))
    assert closed.times_s == (0.0, 0.0, 0.0) and closed.closed and closed.order() == [0, 1, 2]
    late_first = arrival_schedule([_row(0, 0, 5.0), _row(1, 0, 1.0)], LoadSpec("trace"))
    assert late_first.order() == [1, 0]


@pytest.mark.parametrize(("spec", "message"), [
    (dict(kind="closed"), "max_concurrency must be >= 1 for a closed loop"),
    (dict(kind="closed", max_concurrency=0), "max_concurrency must be >= 1 for a closed loop"),
    (dict(kind="poisson", request_rate=0.0), "request_rate must be > 0"),
    (dict(kind="poisson", request_rate=math.nan), "request_rate must be > 0"),
    (dict(kind="poisson", request_rate=1.0, max_concurrency=-1), "max_concurrency must be >= 1"),
    (dict(kind="trace", slowdown=math.inf), "slowdown must be a finite number"),
    (dict(kind="burst"), "kind: unknown load 'burst'"),
])
def test_bad_load_settings_name_the_field(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoadSpec.of(**spec)  # type: ignore[arg-type]


class _FixedTimer:
    def batch_seconds(self, batch: Batch) -> float:
        return 0.01

    def frontend_seconds(self, prompt_tokens: int) -> float:
        return 0.0

    def host_transfer_seconds(self, tokens: int, states: int) -> float:
        return 0.0


def test_the_simulator_sends_first_turns_when_the_schedule_says() -> None:
    rows = [_row(s, 0) for s in range(30)]
    schedule = arrival_schedule(rows, LoadSpec("poisson", request_rate=20.0), seed=3)
    core = EngineCore(EngineConfig(kv_tokens=10_000, state_slots=64, cache="no_buffer"))
    res = simulate(rows, core, _FixedTimer(), schedule)  # type: ignore[arg-type]
    assert sorted((r.row_index, r.scheduled_s) for r in res.records) == [
        (i, round(t * 1e9) / 1e9) for i, t in enumerate(schedule.times_s)]
    with pytest.raises(ValueError, match="2 times for 30 rows"):
        simulate(rows, core, _FixedTimer(), arrival_schedule(rows[:2], LoadSpec("trace")))  # type: ignore[arg-type]
