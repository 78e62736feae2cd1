"""The `sim` engine: reference_impl's discrete-event simulator in-process; records are *modelled*."""

from __future__ import annotations

from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.engines.base import EngineInfo, TrialContext
from hybridbench.errors import ConfigError
from hybridbench.plan.types import RunPlan
from hybridbench.records.schema import Record
from reference_impl.engine.arms import parse_arm
from reference_impl.engine.core import EngineConfig, EngineCore, EngineCounters
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.simulator import ArrivalSpec, simulate
from reference_impl.engine.sizing import engine_config
from reference_impl.models import get_model

__all__ = ["SimEngine"]


def _arrival(cfg: RunCfg, seed: int) -> ArrivalSpec:
    load = cfg.load
    if load.kind == "closed":
        return ArrivalSpec("closed", max_concurrency=load.max_concurrency, seed=seed)
    if load.kind == "poisson":
        return ArrivalSpec("poisson", request_rate=load.request_rate, max_concurrency=load.max_concurrency or None,
                           seed=seed)
    if load.kind == "trace":
        return ArrivalSpec("trace", slowdown=load.slowdown, max_concurrency=load.max_concurrency or None, seed=seed)
    raise ConfigError(f"load.kind: unknown load {load.kind!r}; choose closed, poisson or trace")


def _policy_weight(cfg: RunCfg, policy: str) -> float | None:
    """The eviction policy's weight from the arm knobs (None: the policy's own default)."""
    return {"seglen": cfg.arm.seglen.eff_weight, "marconi": cfg.arm.marconi.eff_weight}.get(policy)


class SimEngine:
    name = "sim"

    def __init__(self) -> None:
        self._configs: dict[str, EngineConfig] = {}
        self._timer: CostModel | None = None

    def validate(self, cfg: RunCfg, plan: RunPlan) -> None:
        try:
            model = get_model(cfg.model.name)
            gpu = get_gpu(cfg.engine.gpu)
            self._timer = CostModel(model, gpu, tp=cfg.engine.tp)
            for arm in plan.arms:
                self._configs[arm] = engine_config(
                    parse_arm(arm),
                    self._timer,
                    mem_fraction_static=cfg.engine.mem_fraction_static,
                    kv_tokens=cfg.engine.kv_tokens or None,
                    state_slots=cfg.engine.max_mamba_cache_size or None,
                    chunked_prefill_size=cfg.engine.chunked_prefill_size,
                    page_size=cfg.engine.page_size,
                    track_interval=cfg.engine.track_interval,
                    eff_weight=_policy_weight(cfg, parse_arm(arm).policy),
                    hicache_ratio=cfg.arm.l2.hicache_ratio,
                )
            _arrival(cfg, 0)
            if cfg.load.kind == "closed" and cfg.load.max_concurrency < 1:
                raise ConfigError("load.max_concurrency must be >= 1 for a closed loop")
            if cfg.load.kind == "poisson" and cfg.load.request_rate <= 0:
                raise ConfigError("load.request_rate must be > 0 for Poisson arrivals")
        except KeyError as exc:
            raise ConfigError(f"engine sim: {exc.args[0]}") from None
        except ValueError as exc:
            raise ConfigError(f"engine sim: {exc}") from None

    def run_trial(self, cfg: RunCfg, ctx: TrialContext) -> dict[str, Any]:
        assert self._timer is not None, "validate() first"
        core = EngineCore(self._configs[ctx.trial.arm])
        if cfg.load.prime:  # the same requests once through the same cache, unrecorded
            simulate(ctx.rows, core, self._timer, _arrival(cfg, ctx.trial.seed))
            core.counters = EngineCounters()  # peaks and retractions of the measured pass only
        evicted_before = (core.tree.tokens_evicted_total, core.tree.states_evicted_total)
        result = simulate(ctx.rows, core, self._timer, _arrival(cfg, ctx.trial.seed))
        for rec in result.records:
            ctx.emit(
                Record(
                    run_id=ctx.plan.fingerprint,
                    trial_id=ctx.trial.trial_id,
                    arm=ctx.trial.arm,
                    workload=ctx.trial.workload,
                    repeat=ctx.trial.repeat,
                    request_index=rec.row_index,
                    session_id=rec.session_id,
                    turn_id=rec.turn_id,
                    scheduled_s=rec.scheduled_s,
                    sent_s=rec.sent_s,
                    first_token_s=rec.first_token_s,
                    end_s=rec.end_s,
                    prompt_tokens=rec.prompt_tokens,
                    output_tokens=rec.output_tokens,
                    cached_tokens=rec.cached_tokens,
                    status="ok" if rec.status == "ok" else "error",
                    error=rec.error,
                    itl_ms=rec.itl_ms,
                    cache_state="primed" if cfg.load.prime else "cold-flushed",
                    modelled=True,
                )
            )
        return {
            "peak_token_usage": result.peak_kv_used / result.kv_pool_tokens,
            "peak_mamba_usage": result.peak_states_used / result.state_pool_slots,
            "retractions": result.retractions,
            "aborted": result.aborted,
            "kv_pool_tokens": result.kv_pool_tokens,
            "state_pool_slots": result.state_pool_slots,
            "crashes": 0,
            "evicted_tokens": core.tree.tokens_evicted_total - evicted_before[0],
            "evicted_states": core.tree.states_evicted_total - evicted_before[1],
        }

    def info(self) -> EngineInfo:
        timer = self._timer
        extra = {} if timer is None else {"model": timer.model.name, "gpu": timer.gpu.name, "tp": timer.tp,
                                          "factors": repr(timer.factors)}
        return EngineInfo(name="sim", version="reference_impl", extra=extra)

    def close(self) -> None:
        return
