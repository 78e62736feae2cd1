"""What the harness drives per run: an engine that runs trials (the server trial runner around a server
engine's lifecycle, or the simulator), and what it is handed per trial."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hybridbench.config.schema import RunCfg
from hybridbench.engines.kv_pool import KVPool
from hybridbench.engines.traits import EngineTraits
from hybridbench.plan.types import RunPlan, Trial
from hybridbench.probes.base import JsonRow, Probe
from hybridbench.records.schema import Record
from workloads.arrival import ArrivalSchedule
from workloads.trace import TraceRow

__all__ = ["Engine", "EngineInfo", "PlannedProbe", "TrialContext"]


@dataclass(frozen=True, slots=True)
class EngineInfo:
    name: str
    version: str
    command: tuple[str, ...] = ()  # the exact launch command, secrets redacted
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlannedProbe:
    probe: Probe
    emit: Callable[[JsonRow], None]  # appends one sample to the probe's <name>.jsonl


@dataclass(frozen=True, slots=True)
class TrialContext:
    plan: RunPlan
    trial: Trial
    rows: Sequence[TraceRow]
    emit: Callable[[Record], None]  # appends one record to records.jsonl as it completes
    probes: tuple[PlannedProbe, ...] = ()  # run after the trial's measured traffic, in this order
    schedule: ArrivalSchedule = field(kw_only=True)  # when each row is meant to be sent (built before any trial)


class Engine(Protocol):
    name: str

    @property
    def traits(self) -> EngineTraits: ...

    def validate(self, cfg: RunCfg, plan: RunPlan) -> None:
        """Plan time: raise ConfigError naming any arm or option this engine cannot express."""
        ...

    def kv_pool(self, cfg: RunCfg) -> KVPool | None:
        """Plan time, after validate: the KV pool when the plan fixes its size; None when the server sizes it."""
        ...

    def run_trial(self, cfg: RunCfg, ctx: TrialContext) -> dict[str, Any]:
        """Run one trial, emitting one record per request; return server-side snapshots (peaks...)."""
        ...

    def info(self) -> EngineInfo: ...

    def close(self) -> None: ...
