"""Config -> everything a run fixes before a trace is generated: the one plan-time path of ``python -m hybridbench``
and ``hybridbench plan``.

Both call :func:`typed_config` on what Hydra composed and :func:`prepare_run` on the result, so whatever a run
refuses at plan time (exit 2), the preview refuses too. What depends on the machine (GPUs, weights) comes back as
:class:`~hybridbench.doctor.machine.Finding` s: the run refuses on them (:func:`refuse_on_machine`), the preview
prints them as warnings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hybridbench.checks.registry import validate_checks, validate_judged_by, validate_subjects
from hybridbench.config.gpu_kind import normalise_gpu
from hybridbench.config.schema import RunCfg
from hybridbench.config.strict import reject_unknown_keys
from hybridbench.config.validate import check_unread_keys
from hybridbench.doctor.machine import Finding, machine_findings
from hybridbench.engines.base import Engine
from hybridbench.engines.registry import make_engine
from hybridbench.engines.tp_split import refuse_unsplit_tp
from hybridbench.errors import ConfigError
from hybridbench.load.progress import env_mode
from hybridbench.plan.arms import plan_arm
from hybridbench.plan.build import build_plan
from hybridbench.plan.data import apply_data
from hybridbench.plan.sessions import note_kept_sessions
from hybridbench.plan.types import RunPlan, WorkloadPlan
from hybridbench.probes.base import Probe
from hybridbench.probes.registry import plan_probes
from hybridbench.results.bundle import pr_number
from workloads.errors import WorkloadError
from workloads.generate import check_shape, generate_trace, shaped
from workloads.registry import get_workload
from workloads.trace import TraceError, TraceRow, TraceStream, read_trace

__all__ = ["PreparedRun", "generate_rows", "materialize", "prepare_run", "refuse_on_machine", "resolved_config",
           "typed_config"]


@dataclass(frozen=True, slots=True)
class PreparedRun:
    plan: RunPlan
    engine: Engine  # validated: every arm's command built against the installed server's --help
    probes: tuple[Probe, ...]
    machine: tuple[Finding, ...]  # GPUs and weights, as this machine sees them
    data_notes: tuple[str, ...] = ()  # synthetic stand-ins a GPU run falls back to (hybridbench.plan.data)


def typed_config(cfg: DictConfig) -> tuple[RunCfg, dict[str, Any]]:
    """Hydra's composed config -> (the typed config, the resolved dict), engine.gpu in its one spelling in both;
    unknown keys, an unknown GPU kind and an interpolation that does not resolve are a ConfigError."""
    resolved = resolved_config(cfg)
    reject_unknown_keys(cfg, RunCfg)
    run_cfg = OmegaConf.to_object(cfg)
    assert isinstance(run_cfg, RunCfg)
    return normalise_gpu(run_cfg, resolved)


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    """Every interpolation resolved; ConfigError naming the key whose one does not (``seed=${oc.env:UNSET}``):
    a run reported that as an internal error (exit 3, a crash file in its run dir), the plan as exit 2."""
    try:
        resolved: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        key = getattr(exc, "full_key", None)
        raise ConfigError(f"{key}: {why}" if key else why) from None
    return resolved


def prepare_run(cfg: RunCfg, run_dir: Path, resolved: dict[str, Any]) -> PreparedRun:
    """Validate and plan; ConfigError (exit 2) names the first key, arm or flag that cannot run. Nothing starts."""
    env_mode()  # a bad HYBRIDBENCH_PROGRESS is refused here, not found out at the first trial
    pr_number()  # and a bad HYBRIDBENCH_PR, not found out when the bundle is written at the end
    validate_checks(cfg.checks)
    validate_judged_by(cfg.workloads)
    data_notes = apply_data(cfg, resolved)  # data.* into the workloads' sources, before the plan records them
    note_kept_sessions(cfg, resolved)  # a load cut to its first sessions says so in the report
    plan = build_plan(cfg, run_dir, resolved)
    engine = make_engine(cfg.engine.name)
    refuse_unsplit_tp(cfg)  # a TP the model's heads do not split: every GPU server stops at start-up
    engine.validate(cfg, plan)
    # after the engine: an arm it cannot run is the first thing to say; then whether the arms feed every check
    validate_subjects(cfg.checks.enabled, plan.arms, plan.baseline_arm,
                      frozenset(s.name for s in plan.arm_specs if not s.cache_on),
                      [w.judged_by for w in cfg.workloads.values()], refusal=_arm_refusal(cfg, plan, engine))
    check_unread_keys(cfg)  # after the engine: an experiment made for another engine is refused by what it runs
    probes = plan_probes(cfg, engine.name, engine.traits)  # a probe the engine cannot serve: exit 2, here
    return PreparedRun(plan, engine, tuple(probes), machine_findings(cfg), data_notes)


def _arm_refusal(cfg: RunCfg, plan: RunPlan, engine: Engine) -> Callable[[str], str]:
    """Why ``engine`` cannot run an arm the plan does not have ("" when it can): asked only to word a refusal."""
    def why(name: str) -> str:
        try:
            spec = plan_arm(name, cfg.arm)
            engine.validate(cfg, dataclasses.replace(plan, arms=(spec.name,), arm_specs=(spec,)))
        except ConfigError as exc:
            return str(exc)
        return ""
    return why


def refuse_on_machine(prepared: PreparedRun) -> None:
    """A run's refusal of what this machine lacks (too few GPUs, weights absent with downloads off)."""
    for finding in prepared.machine:
        if finding.status == "refuse":
            raise ConfigError(finding.message)


def materialize(w: WorkloadPlan, cfg: RunCfg, vocab_size: int) -> list[TraceRow]:
    """Generate the workload's trace into the run dir: the generator called with its typed parameters, as
    ``python -m workloads.generate`` with the plan's ``argv`` would; bad input is one line naming the workload."""
    Path(w.trace_path).parent.mkdir(parents=True, exist_ok=True)
    c = cfg.workloads[w.name]
    scale = c.scale * cfg.engine.workload_scale
    try:
        generate_trace(c.kind, c.params, vocab_size=vocab_size, seed=w.seed, output=w.trace_path,
                       preset=c.preset or None, scale=scale if scale > 1 else None, keep_sessions=c.keep_sessions)
    except (WorkloadError, TraceError) as exc:
        raise ConfigError(f"workloads.{w.name}: {' '.join(str(exc).split())}") from None
    except OSError as exc:
        raise ConfigError(f"workloads.{w.name}: {exc.filename or w.trace_path}: {exc.strerror or exc}") from None
    try:
        return list(read_trace(w.trace_path, vocab_size).rows)  # a replayed file may hold any id
    except TraceError as exc:
        raise ConfigError(f"workloads.{w.name}: {exc}") from None


def generate_rows(w: WorkloadPlan, cfg: RunCfg, vocab_size: int) -> TraceStream:
    """The trace :func:`materialize` writes, generated in memory by the same generator, scaling, session cut and id
    check (the preview: no file to write and read back), its rows a list; the same one-line errors."""
    c = cfg.workloads[w.name]
    scale = c.scale * cfg.engine.workload_scale
    try:
        check_shape(vocab_size, c.keep_sessions)  # as generate_trace checks them for materialize
        stream = get_workload(c.kind).make(c.params, vocab_size, w.seed, preset=c.preset or None)
        stream = shaped(stream, vocab_size, scale if scale > 1 else None, c.keep_sessions)
        return TraceStream(list(stream.rows), stream.metadata)
    except (WorkloadError, TraceError) as exc:
        raise ConfigError(f"workloads.{w.name}: {' '.join(str(exc).split())}") from None
    except OSError as exc:
        raise ConfigError(f"workloads.{w.name}: {exc.filename or w.trace_path}: {exc.strerror or exc}") from None
