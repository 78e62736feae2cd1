"""The `sim` engine: reference_impl's discrete-event simulator in-process; records are *modelled*."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.engines.arm_table import ArmTable, nothing
from hybridbench.engines.base import EngineInfo, TrialContext
from hybridbench.engines.kv_pool import KVPool
from hybridbench.engines.reference_cmd import reference_refusals
from hybridbench.engines.traits import COUNTERS, EngineTraits
from hybridbench.errors import ConfigError
from hybridbench.plan.types import RunPlan
from hybridbench.records.build import RequestOutcome, trial_record
from hybridbench.records.schema import CacheState
from reference_impl.engine.arms import ArmSpec
from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore, EngineCounters
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.simulator import simulate
from reference_impl.engine.sizing import engine_config
from reference_impl.models import get_model
from reference_impl.radix.tree import cache_chunk_size

__all__ = ["SimEngine"]


def _weight(spec: ArmSpec, ctx: None) -> list[tuple[str, float | None]]:
    return [("eff_weight", spec.knobs.eff_weight)]


def _host_tier(spec: ArmSpec, ctx: None) -> list[tuple[str, float | None]]:
    return [("hicache_ratio", spec.knobs.l2.hicache_ratio if spec.knobs.l2 is not None else None)]


# What the simulator can express of an arm, and how: ``engine_config`` keywords beside the spec itself.
SIM_ARMS: ArmTable[None, tuple[str, float | None]] = ArmTable(
    engine="sim",
    strategies={"disabled": nothing, "no_buffer": nothing, "extra_buffer": nothing, "extra_buffer_lazy": nothing},
    policies={"lru": nothing, "seglen": _weight},
    host_tier=_host_tier,
    why_not=reference_refusals(),
)


def _host_loaded(core: EngineCore) -> int:
    """KV tokens hits loaded back from the host tier: the hits that outlived a device eviction."""
    return core.host.counters.load_back_tokens if core.host is not None else 0


class SimEngine:
    name = "sim"
    traits = EngineTraits(counters=COUNTERS)  # no server: no probe can be served; its tree counts everything

    def __init__(self, *, block: int = 0) -> None:
        """``block`` > 0: a server whose cache keeps mamba states and hits on whole blocks of that many tokens only
        (vLLM's align mode; hybridbench.preview.forecast_page). Every cache-on arm is then simulated as SGLang's
        extra_buffer with its page, checkpoint grid and decode tracking all on the block: no_buffer would keep a
        state at each prompt's unaligned end, which such a server never hits."""
        self._configs: dict[str, EngineConfig] = {}
        self._timer: CostModel | None = None
        self._block = block

    def validate(self, cfg: RunCfg, plan: RunPlan) -> None:
        try:
            model = get_model(cfg.model.name, temporal_dtype=cfg.model.mamba_ssm_dtype)
            gpu = get_gpu(cfg.engine.gpu)
            self._timer = CostModel(model, gpu, tp=cfg.engine.tp, quantization=cfg.model.quantization)
            block = self._block
            for spec in plan.arm_specs:
                knobs = dict(SIM_ARMS.express(spec, None))
                config = engine_config(
                    replace(spec, strategy="extra_buffer") if block and spec.strategy == "no_buffer" else spec,
                    self._timer,
                    mem_fraction_static=cfg.engine.mem_fraction_static,
                    kv_tokens=cfg.engine.kv_tokens or None,
                    state_slots=cfg.engine.max_mamba_cache_size or None,
                    chunked_prefill_size=cfg.engine.chunked_prefill_size,
                    page_size=block or cfg.engine.page_size,
                    track_interval=block or cfg.engine.track_interval,
                    eff_weight=knobs.get("eff_weight"),
                    hicache_ratio=knobs.get("hicache_ratio"),
                )
                self._configs[spec.name] = config = replace(config, mamba_chunk_size=block) if block else config
                chunk = cache_chunk_size(config.mamba_chunk_size, config.semantics)
                if max(chunk, config.page_size) % min(chunk, config.page_size):  # the tree refuses it mid-trial
                    raise ConfigError(f"engine.page_size={config.page_size}: model {cfg.model.name}'s {chunk}-token "
                                      "mamba chunk and the page must divide one another (SGLang refuses it at "
                                      f"start-up); use a page size that divides {chunk} or a multiple of it")
        except KeyError as exc:
            raise ConfigError(f"engine sim: {exc.args[0]}") from None
        except ValueError as exc:
            raise ConfigError(f"engine sim: {exc}") from None

    def kv_pool(self, cfg: RunCfg) -> KVPool | None:
        """The smallest pool ``validate`` sized (``engine_config``: the memory model, or engine.kv_tokens)."""
        if not self._configs:
            return None
        e = cfg.engine
        key = "engine.kv_tokens" if e.kv_tokens else (
            f"engine.mem_fraction_static={e.mem_fraction_static} of {e.tp} x {e.gpu} after {cfg.model.name}'s weights "
            "and states; or set engine.kv_tokens")
        return KVPool(min(c.kv_tokens for c in self._configs.values()), key)

    def run_trial(self, cfg: RunCfg, ctx: TrialContext) -> dict[str, Any]:
        assert self._timer is not None, "validate() first"
        core = EngineCore(self._configs[ctx.trial.arm])
        if cfg.load.prime:  # the same requests once through the same cache, unrecorded
            simulate(ctx.rows, core, self._timer, ctx.schedule)
            core.counters = EngineCounters()  # peaks and retractions of the measured pass only
        evicted_before = (core.tree.tokens_evicted_total, core.tree.states_evicted_total, _host_loaded(core))
        result = simulate(ctx.rows, core, self._timer, ctx.schedule)
        state: CacheState = "primed" if cfg.load.prime else "cold-flushed"
        for rec in result.records:
            ctx.emit(trial_record(ctx.plan.fingerprint, ctx.trial, RequestOutcome(
                index=rec.row_index, session_id=rec.session_id, turn_id=rec.turn_id, scheduled_s=rec.scheduled_s,
                sent_s=rec.sent_s, first_token_s=rec.first_token_s, end_s=rec.end_s, prompt_tokens=rec.prompt_tokens,
                output_tokens=rec.output_tokens, cached_tokens=rec.cached_tokens,
                status=rec.status if rec.status in ("ok", "skipped") else "error", error=rec.error,
                itl_ms=tuple(rec.itl_ms),
            ), state, modelled=True))
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
            "host_loaded_tokens": _host_loaded(core) - evicted_before[2],
        }

    def info(self) -> EngineInfo:
        timer = self._timer
        extra = {} if timer is None else {"model": timer.model.name, "gpu": timer.gpu.name, "tp": timer.tp,
                                          "quantization": timer.quantization, "factors": repr(timer.factors),
                                          "state_dtypes": f"conv {timer.model.conv_dtype}, "
                                                          f"temporal {timer.model.temporal_dtype}"}
        return EngineInfo(name="sim", version="reference_impl", extra=extra)

    def close(self) -> None:
        return
