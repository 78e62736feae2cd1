"""The load settings, checked once at plan time (before any server starts) into ``workloads.arrival.LoadSpec``.

``load.max_concurrency: 0`` means no cap for the open loops (poisson, trace); a closed loop needs one.
``load.prime`` is not part of the arrival process: the engines read it from the config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hybridbench.config.schema import LoadCfg
from hybridbench.errors import ConfigError
from workloads.arrival import ArrivalSchedule, LoadSpec, arrival_schedule
from workloads.trace import TraceRow

if TYPE_CHECKING:
    from hybridbench.plan.types import RunPlan

__all__ = ["plan_load", "planned_schedules"]


def plan_load(load: LoadCfg, request_rate: float = 0.0, workload: str = "") -> LoadSpec:
    """ConfigError naming the ``load.*`` key on a bad kind or value. ``request_rate`` (> 0) is one workload's
    own rate (``workloads.<workload>.request_rate``), in place of ``load.request_rate`` under a poisson load."""
    kind = str(load.kind)
    cap: int | None = load.max_concurrency
    if kind != "closed" and cap == 0:
        cap = None
    if not request_rate >= 0:  # NaN too
        raise ConfigError(f"workloads.{workload}.request_rate must be > 0 (or 0: load.request_rate), "
                          f"got {request_rate}")
    rate = request_rate or load.request_rate
    try:
        return LoadSpec.of(kind, max_concurrency=cap, request_rate=rate if kind == "poisson" else None,
                           slowdown=load.slowdown)
    except ValueError as exc:
        raise ConfigError(f"load.{exc}") from None


def planned_schedules(plan: RunPlan, traces: Mapping[str, Sequence[TraceRow]]) -> dict[str, ArrivalSchedule]:
    """Every trial's arrivals (trial id -> schedule), from the traces as drawn; a schedule no consumer can follow
    (``load.slowdown`` times a trace's timestamps, or a Poisson rate, past ``workloads.limits.MAX_ARRIVAL_S``) is a
    ConfigError naming the workload and the ``load.*`` key, before any server starts."""
    out: dict[str, ArrivalSchedule] = {}
    for t in plan.trials:
        w = plan.workload(t.workload)
        try:
            out[t.trial_id] = arrival_schedule(traces[t.workload], w.load, t.seed)
        except ValueError as exc:
            raise ConfigError(f"workloads.{t.workload}: load.{exc}") from None
    return out
