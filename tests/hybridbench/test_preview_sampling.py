"""The forecast of a workload too large to simulate whole (hybridbench/preview/sampling.py): a sample stands for the
whole load's wall time only where that scales (closed loops that a sample still fills, Poisson arrivals of single
requests); trace replays, open loops of multi-turn sessions and loops wider than any sample are simulated whole. A
sample's hit rate and TTFT are a lighter load's: never given as the GPU run's.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest

from hybridbench.plan.build import build_plan, effective_vocab
from hybridbench.prepare import generate_rows
from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import Composed, compose_run
from hybridbench.preview.forecast import Forecast, TrialForecast, forecast_run
from hybridbench.preview.render import render_text
from hybridbench.preview.sampling import PREFIX_KEY_TOKENS, Sample, SendPhase, sample_load, whole_wall_s
from hybridbench.report.forecast import forecast_section
from workloads.arrival import LoadSpec
from workloads.trace import TraceRow

WHOLE = 10**9  # a --forecast-requests no workload reaches


@functools.cache
def _run(*overrides: str) -> tuple[Composed, dict[str, list[TraceRow]]]:
    """The composed run and its workloads' rows, as the plan generates them (hybridbench.prepare.generate_rows), once
    per command line: each is forecast sampled and whole (forecast_run copies the config, and reads the rows)."""
    composed = compose_run(list(overrides))
    with tempfile.TemporaryDirectory() as tmp:
        plan = build_plan(composed.cfg, Path(tmp), composed.resolved)
    vocab = effective_vocab(composed.cfg)
    return composed, {w.name: list(generate_rows(w, composed.cfg, vocab).rows) for w in plan.workloads}


def forecast(max_requests: int, *overrides: str) -> Forecast:
    composed, traces = _run(*overrides)
    return forecast_run(composed.cfg, composed.resolved, traces=traces, max_requests=max_requests)


def by_trial(fc: Forecast) -> dict[tuple[str, str], TrialForecast]:
    return {(t.arm, t.workload): t for t in fc.trials}


@pytest.fixture(scope="module")
def radix_sampled() -> Forecast:
    return forecast(100, "+experiment=radix", "engine=sim")


def test_a_trace_replay_is_forecast_whole_whatever_the_sample_size() -> None:
    """l2 sampled used to keep its sessions' timestamps and then multiply the wall time by k: 1h12m at 100 requests
    for a trace taking 10m53s. Its sessions last as long as the server is slow, so no sample's wall time scales."""
    small = ("+experiment=l2", "engine=sim", "workloads.swebench.params.num_sessions=30")
    sampled, whole = forecast(60, *small), forecast(WHOLE, *small)
    assert all(t.requests > 60 for t in sampled.trials)
    for key, t in by_trial(sampled).items():
        w = by_trial(whole)[key]
        assert t.simulated == t.requests and t.sample is None
        assert (t.wall_s, t.token_hit_rate, t.mean_ttft_ms) == (w.wall_s, w.token_hit_rate, w.mean_ttft_ms)
    assert not sampled.sampled and "trace replay" in sampled.simulated_whole[0]


@pytest.mark.parametrize(("overrides", "workload"), [
    (("+experiment=radix", "engine=sim"), "gsp"),  # closed loop of 5
    (("+experiment=noise", "engine=sim"), "gsp_prefix_heavy"),  # closed loop of 16
    (("+experiment=seglen", "engine=sim", "arms=[branching]", "~workloads.multi_group", "~workloads.swebench",
      "~workloads.sharegpt"), "mixed_prefix"),  # Poisson at 8 req/s
])
def test_a_sampled_loop_or_poisson_load_forecasts_the_whole_loads_wall_time(overrides: tuple[str, ...],
                                                                          workload: str) -> None:
    """Every k-th session times k was 10% (radix), 23% (noise) and 6% (seglen's mixed prefixes) too long: a shared
    prefix amortised its first miss over fewer requests, and the drain was counted k times."""
    sampled, whole = forecast(400, *overrides), forecast(WHOLE, *overrides)
    for key, t in by_trial(sampled).items():
        if key[1] != workload:
            continue
        assert t.simulated < t.requests, "the load must be sampled for this test to mean anything"
        assert t.wall_s == pytest.approx(by_trial(whole)[key].wall_s, rel=0.02), key


def test_a_sampled_trials_hit_rate_and_ttft_are_not_given_as_the_gpu_runs(radix_sampled: Forecast) -> None:
    for t in radix_sampled.trials:
        assert t.simulated < t.requests
        assert t.token_hit_rate is None and t.mean_ttft_ms is None
        assert t.sample is not None and t.sample.mean_ttft_ms is not None
    assert all(a["token_hit_rate"] is None and a["mean_ttft_ms"] is None
               for a in radix_sampled.arm_summary().values())
    lru = radix_sampled.to_json()["trials"][1]
    section = "\n".join(forecast_section({"forecast": radix_sampled.to_json(), "aggregates": {
        "gsp": {"lru": {"token_hit_rate": 0.7, "mean_ttft_ms": 450.0, "duration": 134.0}}}}))
    assert "| gsp | lru | sampled / 70.0% | sampled / 450 |" in section, section
    assert f"{lru['sample']['token_hit_rate']:.1%} /" not in section


def test_the_plan_prints_a_samples_figures_as_not_forecast() -> None:
    text = render_text(build_preview(compose_run(["+experiment=radix", "engine=sim"]), max_requests=100))
    lines = [ln for ln in text.splitlines() if ln.startswith("  lru / gsp:")]
    assert len(lines) == 1 and "hit rate and TTFT not forecast" in lines[0], text
    assert "token hit rate" not in lines[0] and "not comparable with the GPU run" in lines[0]
    assert "arm lru: hit rate and TTFT not forecast" in text
    assert "pass" not in text.split("forecast (simulator", 1)[1]  # the forecast judges nothing


def test_a_loop_wider_than_any_sample_is_simulated_whole() -> None:
    """survival's 1024 requests at once: a sample of 94 is a burst of 94, its wall time neither the whole's nor
    k times its own (4m53s for 2m52s)."""
    fc = forecast(50, "+experiment=branching", "engine=sim", "load.max_concurrency=100")
    assert all(t.simulated == t.requests > 50 and t.sample is None for t in fc.trials)
    assert "sessions per slot" in fc.simulated_whole[0]


def test_poisson_arrivals_of_multi_turn_sessions_are_simulated_whole() -> None:
    fc = forecast(50, "+experiment=branching", "engine=sim", "load.kind=poisson", "load.request_rate=4",
                  "workloads.gsp.params.num_turns=2")
    assert all(t.simulated == t.requests > 50 for t in fc.trials)
    assert "later turns wait" in fc.simulated_whole[0]


def rows_of_groups(groups: int, sessions: int, turns: int = 1) -> list[TraceRow]:
    """``groups`` shared prefixes of PREFIX_KEY_TOKENS tokens, ``sessions`` each, in interleaved order."""
    out = []
    for s in range(sessions):
        for g in range(groups):
            head = [g + 1] * PREFIX_KEY_TOKENS
            out += [TraceRow(f"{g}-{s}", t, 0.0, [*head, 1000 + s, t], [7]) for t in range(turns)]
    return out


def test_a_sample_keeps_or_drops_whole_prefix_groups() -> None:
    rows = rows_of_groups(10, 5)
    s = sample_load(rows, LoadSpec("closed", max_concurrency=1), 20)
    assert (s.stride, s.groups, s.unit, len(s.rows)) == (3, 10, "prefix group", 20)
    kept = {str(r.session_id).split("-")[0] for r in s.rows}
    assert kept == {"0", "3", "6", "9"}
    assert [r for r in rows if str(r.session_id).split("-")[0] in kept] == list(s.rows)  # in the trace's order


def test_a_group_larger_than_the_budget_is_sampled_by_session() -> None:
    s = sample_load(rows_of_groups(1, 50), LoadSpec("closed", max_concurrency=1), 10)
    assert s.unit == "session" and s.stride == 5 and len(s.rows) == 10


def test_a_closed_loops_sample_keeps_two_sessions_per_slot_past_the_budget() -> None:
    rows = rows_of_groups(100, 1)
    s = sample_load(rows, LoadSpec("closed", max_concurrency=10), 10)
    assert s.sampled and len({r.session_id for r in s.rows}) >= 20 and len(s.rows) < len(rows)


def test_the_whole_loads_wall_time_from_a_samples_send_phase() -> None:
    sample = Sample(tuple(rows_of_groups(10, 1)), 100, 10, 100, "prefix group")
    # A loop of 2: 10 sent by 8 s, the last finished at 10 s. The whole load sends its last after 98 finishes
    # at the sample's pace (8 of them in 8 s), then drains once.
    phase = SendPhase(0.0, 8.0, 10.0, 2.0, 2.0, waited=True)
    assert whole_wall_s(sample, LoadSpec("closed", max_concurrency=2), phase, 0.0) == pytest.approx(98 + 2)
    # Poisson: the whole load's own arrivals, then the sample's drain; longer where the backlog grew with time.
    poisson = LoadSpec("poisson", request_rate=1.0)
    steady = SendPhase(0.0, 9.0, 10.0, 3.0, 3.0, waited=False)
    assert whole_wall_s(sample, poisson, steady, 99.0) == pytest.approx(100.0)
    behind = SendPhase(0.0, 9.0, 19.0, 2.0, 6.0, waited=False)
    assert whole_wall_s(sample, poisson, behind, 99.0) > 99.0 + 10 * 5
    assert whole_wall_s(Sample(sample.rows, 10, 1, 10, "session"), poisson, behind, 0.0) == 19.0
