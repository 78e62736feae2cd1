"""A run's forecast: the ``sim`` engine (reference_impl's simulator and cost model) on the run's own config, for the
run's GPU, model, TP and pools, before anything is launched.

Each (arm, workload) is simulated once, on repeat 0's arrivals; later repeats differ only in their Poisson draws
and are forecast alike. Where a workload has more than ``max_requests`` requests, a deterministic sample of whole
sessions (every k-th) is simulated and the wall time scaled by k: the preview stays within its time budget on a
CPU and says so in ``sampled``. Hit rates and TTFT of a sample are those of a k-times lighter load: read them as
the model's trend, not its exact figure. The cost model's known error on the published runs it was fitted to is
:func:`known_error` (reference_impl.engine.calibration, benchmarks/calibrate_sim.py).
"""

from __future__ import annotations

import copy
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.engines.base import TrialContext
from hybridbench.engines.sim import SimEngine
from hybridbench.errors import ConfigError
from hybridbench.plan.build import build_plan, effective_vocab
from hybridbench.plan.types import MODELLED_ENGINES
from hybridbench.prepare import materialize
from hybridbench.records.schema import Record
from reference_impl.engine.calibration import SEED_RADIX_TARGETS, TOLERANCE
from workloads.arrival import arrival_schedule
from workloads.trace import TraceRow

__all__ = ["DEFAULT_MAX_REQUESTS", "Forecast", "TrialForecast", "forecast_run", "known_error", "sample_sessions"]

DEFAULT_MAX_REQUESTS = 400  # per workload; a few seconds of simulation each on one CPU core


@dataclass(frozen=True, slots=True)
class TrialForecast:
    arm: str
    workload: str
    requests: int  # in the workload (all of it, not the sample)
    simulated: int  # requests the simulator ran (a sample of whole sessions when fewer)
    wall_s: float  # forecast wall time of one trial (sample's span x the sampling factor)
    token_hit_rate: float | None
    mean_ttft_ms: float | None
    failed: int = 0  # simulated requests the modelled server refused (e.g. longer than a pool fixed in the config)


@dataclass(frozen=True, slots=True)
class Forecast:
    gpu: str
    model: str
    tp: int
    trials: tuple[TrialForecast, ...]  # one per (arm, workload); every repeat of it takes as long
    repeats: int
    sampled: tuple[str, ...]  # one line per workload forecast from a sample
    known_error: str
    compute_s: float  # how long the forecast itself took

    @property
    def total_s(self) -> float:
        return self.repeats * sum(t.wall_s for t in self.trials)

    def arm_summary(self) -> dict[str, dict[str, float | None]]:
        out: dict[str, dict[str, float | None]] = {}
        for arm in dict.fromkeys(t.arm for t in self.trials):
            mine = [t for t in self.trials if t.arm == arm]
            hits = [t.token_hit_rate for t in mine if t.token_hit_rate is not None]
            ttft = [t.mean_ttft_ms for t in mine if t.mean_ttft_ms is not None]
            out[arm] = {"token_hit_rate": statistics.fmean(hits) if hits else None,
                        "mean_ttft_ms": statistics.fmean(ttft) if ttft else None,
                        "wall_s": self.repeats * sum(t.wall_s for t in mine)}
        return out

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "model": self.model, "tp": self.tp, "repeats": self.repeats,
                "total_s": self.total_s, "trials": [asdict(t) for t in self.trials], "arms": self.arm_summary(),
                "sampled": list(self.sampled), "known_error": self.known_error, "compute_s": self.compute_s}


def known_error() -> str:
    """The cost model's calibration, as data: the seed run it was fitted to and the tolerance its test holds."""
    arms = ", ".join(f"{arm}: {rps} req/s, {ttft} ms mean TTFT" for arm, (rps, ttft, _) in SEED_RADIX_TARGETS.items())
    return (f"fitted to the radix-cache run of SGLang PR #11214 (Qwen3-Next-80B-A3B, TP4, H100, gsp 50x10, "
            f"concurrency 5; "
            f"{arms}): every figure within {TOLERANCE:.0%} (tests/reference_impl/engine/test_calibration.py); other "
            "models, GPUs and TP are extrapolations")


def sample_sessions(rows: Sequence[TraceRow], max_requests: int) -> tuple[list[TraceRow], int]:
    """Every k-th session (in order of first appearance), with the smallest k that brings the rows to at most
    ``max_requests``; k = 1 keeps everything. Whole sessions, so multi-turn causality is kept."""
    if len(rows) <= max_requests:
        return list(rows), 1
    order = {sid: i for i, sid in enumerate(dict.fromkeys(r.session_id for r in rows))}
    k = 2
    while True:
        kept = [r for r in rows if order[r.session_id] % k == 0]
        if len(kept) <= max_requests or len(order) <= k:
            return kept, k
        k += 1


def _trial_stats(records: list[Record]) -> tuple[float, float | None, float | None, int]:
    sent = [r.sent_s for r in records if r.sent_s is not None]
    ends = [r.end_s for r in records if r.end_s is not None]
    wall = (max(ends) - min(sent)) if sent and ends else 0.0
    prompt = sum(r.prompt_tokens for r in records)
    cached = sum(r.cached_tokens or 0 for r in records)
    ttft = [r.ttft_ms for r in records if r.ttft_ms is not None]
    failed = sum(1 for r in records if r.status != "ok")
    return wall, (cached / prompt if prompt else None), (statistics.fmean(ttft) if ttft else None), failed


def forecast_run(cfg: RunCfg, resolved: dict[str, Any], *, traces: Mapping[str, Sequence[TraceRow]] | None = None,
                 max_requests: int = DEFAULT_MAX_REQUESTS) -> Forecast:
    """The simulator's forecast of this run on its target GPU; ConfigError when the simulator cannot model it (a
    model or GPU reference_impl does not know, an arm only the replayer has). ``traces``: the run's workloads
    already generated (the same seeds and parameters give the same rows), else generated here."""
    if cfg.engine.name == "reference":
        raise ConfigError("the reference engine runs a tiny CPU model: no GPU forecast applies")
    if cfg.engine.name in MODELLED_ENGINES and cfg.engine.name != "sim":
        raise ConfigError(f"engine={cfg.engine.name} is itself a model: no simulator forecast")
    started = time.monotonic()
    sim_cfg = copy.deepcopy(cfg)
    sim_cfg.engine.name = "sim"
    engine = SimEngine()
    with tempfile.TemporaryDirectory(prefix="hybridbench-forecast-") as tmp:
        plan = build_plan(sim_cfg, Path(tmp), resolved)
        engine.validate(sim_cfg, plan)
        trials: list[TrialForecast] = []
        sampled: list[str] = []
        vocab = effective_vocab(sim_cfg)
        for w in plan.workloads:
            everything = traces[w.name] if traces is not None else materialize(w, sim_cfg, vocab)
            rows, k = sample_sessions(everything, max_requests)
            full = len(everything)
            if k > 1:
                sampled.append(f"{w.name}: every {k}th session simulated ({len(rows)} of {full} requests), "
                               f"wall time x{k}")
            for arm in plan.arms:
                trial = next(t for t in plan.trials if t.arm == arm and t.workload == w.name and t.repeat == 0)
                records: list[Record] = []
                ctx = TrialContext(plan, trial, rows, records.append, (),
                                   schedule=arrival_schedule(rows, w.load, trial.seed))
                engine.run_trial(sim_cfg, ctx)
                wall, hits, ttft, failed = _trial_stats(records)
                trials.append(TrialForecast(arm, w.name, full, len(rows), wall * k, hits, ttft, failed))
    return Forecast(cfg.engine.gpu, cfg.model.name, cfg.engine.tp, tuple(trials), cfg.repeats, tuple(sampled),
                    known_error(), time.monotonic() - started)


def run_forecast(cfg: RunCfg, resolved: dict[str, Any], traces: Mapping[str, Sequence[TraceRow]]) -> dict[str, Any]:
    """What a GPU run keeps (forecast.json, bundle ``forecast``): the forecast, or why there is none. The CPU engines
    (reference, and the simulator itself) keep none: their run is the model."""
    try:
        return forecast_run(cfg, resolved, traces=traces).to_json()
    except ConfigError as exc:
        return {"none": str(exc)}
