"""The frozen plan every later stage reads: trials (arm × workload × repeat) with seeds and paths."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from hybridbench.config.schema import MODELLED_ENGINES
from reference_impl.engine.arms import ArmSpec
from workloads.arrival import LoadSpec

__all__ = ["MODELLED_ENGINES", "PLAN_SCHEMA_VERSION", "RunPlan", "Trial", "WorkloadPlan"]

PLAN_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class WorkloadPlan:
    name: str
    kind: str
    seed: int  # one trace per workload, shared by every arm and repeat (A/B on identical requests)
    trace_path: str
    argv: tuple[str, ...]  # the exact `python -m workloads.generate` arguments
    # The arrival process of this workload's trials: the run's load, at the workload's own rate if it has one.
    load: LoadSpec = field(kw_only=True)
    # sha256 of the trace's bytes, recorded once the run wrote it (app): what history keys a series by, since the
    # same arguments give other rows after a generator changes. "" until then (and in `hybridbench plan`).
    trace_sha256: str = field(default="", kw_only=True)


@dataclass(frozen=True, slots=True)
class Trial:
    index: int
    arm: str
    workload: str
    repeat: int
    seed: int  # arrival-process seed (Poisson), derived from the run seed and the repeat

    @property
    def trial_id(self) -> str:
        return f"{self.index:03d}-{self.workload}-{self.arm}-r{self.repeat}"


@dataclass(frozen=True, slots=True)
class RunPlan:
    name: str
    run_dir: str
    engine: str
    arms: tuple[str, ...]
    baseline_arm: str
    workloads: tuple[WorkloadPlan, ...]
    trials: tuple[Trial, ...]
    config: dict[str, Any] = field(default_factory=dict)  # the fully resolved config
    fingerprint: str = ""
    schema_version: int = PLAN_SCHEMA_VERSION
    arm_specs: tuple[ArmSpec, ...] = field(kw_only=True)  # one per arm, in the order of ``arms`` (plan.arms)
    load: LoadSpec = field(kw_only=True)  # the run's load (plan.load); each workload's own: WorkloadPlan.load

    def workload(self, name: str) -> WorkloadPlan:
        return next(w for w in self.workloads if w.name == name)

    def arm(self, name: str) -> ArmSpec:
        """The spec the plan parsed for arm ``name`` (KeyError for an arm the plan does not have)."""
        for spec in self.arm_specs:
            if spec.name == name:
                return spec
        raise KeyError(f"arm {name!r} is not in the plan")

    def with_trace_digests(self, digests: dict[str, str]) -> RunPlan:
        """The plan with each workload's trace digest (workload name -> sha256) recorded."""
        return replace(self, workloads=tuple(replace(w, trace_sha256=digests.get(w.name, w.trace_sha256))
                                             for w in self.workloads))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
