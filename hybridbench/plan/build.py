"""Config -> frozen plan: validate names, cross arms × workloads × repeats, derive seeds, write plan.json.

Trials run repeat by repeat, and within a repeat arm by arm over every workload (A: w1 w2, B: w1 w2,
then again for the next repeat): arms alternate A/B/A/B across repeats, so slow drift on a machine
hits every arm alike, and a server engine launches each arm's server once per repeat and reuses it
across workloads (flushing between trials). Nothing launches before the plan is on disk.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hybridbench.config.redact import redact_config
from hybridbench.config.schema import RunCfg, WorkloadCfg
from hybridbench.config.validate import validate_config
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import default_baseline, plan_arms
from hybridbench.plan.data import GPU_ENGINES
from hybridbench.plan.load import plan_load
from hybridbench.plan.types import RunPlan, Trial, WorkloadPlan
from workloads.errors import WorkloadError
from workloads.registry import WORKLOADS

__all__ = ["build_plan", "check_architecture", "derive_seed", "effective_vocab", "repeat_trials", "workload_argv"]


def derive_seed(*parts: object) -> int:
    """A stable 31-bit seed from the run seed and names (independent of PYTHONHASHSEED)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def effective_vocab(cfg: RunCfg) -> int:
    """Token ids are drawn below the model's vocabulary, capped by what the engine's model has."""
    cap = cfg.engine.max_vocab
    return min(cfg.model.vocab_size, cap) if cap > 0 else cfg.model.vocab_size


def workload_argv(
    name: str, w: WorkloadCfg, vocab_size: int, seed: int, out: Path, *, engine_scale: int = 1
) -> tuple[str, ...]:
    if w.kind not in WORKLOADS:
        raise ConfigError(f"workloads.{name}.kind: unknown workload {w.kind!r}; choose one of {', '.join(WORKLOADS)}")
    argv = [w.kind]
    if w.preset:
        argv += ["--preset", w.preset]
    for key, value in w.params.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not False and value is not None:
            argv += [flag, str(value)]
    argv += ["--vocab-size", str(vocab_size), "--seed", str(seed), "-o", str(out)]
    if w.scale < 1:
        raise ConfigError(f"workloads.{name}.scale must be >= 1, got {w.scale}")
    if w.scale * engine_scale > 1:
        argv += ["--scale", str(w.scale * engine_scale)]
    if w.keep_sessions < 0:
        raise ConfigError(f"workloads.{name}.keep_sessions must be >= 0 (0: every session), got {w.keep_sessions}")
    if w.keep_sessions:
        argv += ["--keep-sessions", str(w.keep_sessions)]
    try:  # the typed parameters the harness will call the generator with: checked now, before any server
        WORKLOADS[w.kind].resolve(w.params, preset=w.preset or None)
    except WorkloadError as exc:
        raise ConfigError(f"workloads.{name}: {exc}") from None
    return tuple(argv)


def repeat_trials(start: int, arms: tuple[str, ...], workloads: tuple[str, ...], repeat: int,
                  run_seed: int) -> tuple[Trial, ...]:
    """One repeat's trials, arm by arm over every workload, numbered from ``start``: the plan's repeats and the
    ones a run earns later (hybridbench.plan.repeats) alike."""
    seed = derive_seed(run_seed, "arrivals", repeat)
    return tuple(Trial(start + i * len(workloads) + j, arm, w, repeat, seed)
                 for i, arm in enumerate(arms) for j, w in enumerate(workloads))


def check_architecture(cfg: RunCfg) -> None:
    """ConfigError naming ``model.architecture`` when an engine that loads model.hf_id is given a model without one.

    Such a server loads the class the checkpoint's config.json names, and its parsers take any model id: with no
    class to check, the plan would pass and the server die at model load, after the weights download (marconi-7b's
    checkpoint is Megatron-LM's, with no config.json: conf/model/marconi-7b.yaml). The CPU engines load no
    checkpoint: "" is fine there."""
    if cfg.engine.name in GPU_ENGINES and not cfg.model.architecture.strip():
        raise ConfigError(
            f"model.architecture is empty for model {cfg.model.name} ({cfg.model.hf_id}): engine={cfg.engine.name} "
            "serves only a checkpoint whose config.json names its class (\"architectures\"); set model.architecture "
            "to that class, or choose a model that has one, e.g. model=nemotron-h-8b (engine=replay and engine=sim "
            "load no checkpoint)")


def build_plan(cfg: RunCfg, run_dir: Path, resolved: dict[str, Any]) -> RunPlan:
    validate_config(cfg)
    arm_specs = plan_arms(list(cfg.arms), cfg.arm)  # unknown or malformed arm names stop here (exit 2)
    load = plan_load(cfg.load)  # so does a bad load, long before any server starts
    arms = [spec.name for spec in arm_specs]
    if not cfg.workloads:
        raise ConfigError("workloads: none configured; pick an experiment with +experiment=NAME (conf/experiment/)")
    baseline = cfg.checks.baseline_arm or default_baseline(arm_specs)
    if baseline not in arms:
        raise ConfigError(f"checks.baseline_arm: {baseline!r} is not one of the arms {arms}")
    check_architecture(cfg)  # the last of the config's own checks: before the engine is asked anything
    traces = run_dir / "traces"
    vocab = effective_vocab(cfg)
    workloads = tuple(
        WorkloadPlan(
            name=name,
            kind=w.kind,
            seed=(seed := derive_seed(cfg.seed, "workload", name)),
            trace_path=str(traces / f"{name}.jsonl"),
            argv=workload_argv(name, w, vocab, seed, traces / f"{name}.jsonl", engine_scale=cfg.engine.workload_scale),
            load=plan_load(cfg.load, w.request_rate, name),
        )
        for name, w in cfg.workloads.items()
    )
    trials: list[Trial] = []
    for repeat in range(cfg.repeats):  # the minimum; hybridbench.plan.repeats extends it repeat by repeat
        trials += repeat_trials(len(trials), tuple(arms), tuple(w.name for w in workloads), repeat, cfg.seed)
    # The plan holds only the redacted config: it is what plan.json, bundle.json and the fingerprint see, so
    # no secret reaches disk and the fingerprint stays the same whichever key a run was given.
    config: dict[str, Any] = redact_config(resolved)
    # Whether the run replaced an earlier one in its directory does not change what it measures.
    measured = {k: v for k, v in config.items() if k != "overwrite"}
    # The fingerprint names the configuration, known before any trace is written: the traces' digests stay out.
    body = {"config": measured, "trials": [asdict(t) for t in trials],
            "workloads": [{k: v for k, v in asdict(w).items() if k != "trace_sha256"} for w in workloads]}
    fingerprint = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return RunPlan(
        name=cfg.name,
        run_dir=str(run_dir),
        engine=cfg.engine.name,
        arms=tuple(arms),
        baseline_arm=baseline,
        workloads=workloads,
        trials=tuple(trials),
        config=config,
        fingerprint=fingerprint,
        arm_specs=arm_specs,
        load=load,
    )
