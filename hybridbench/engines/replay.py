"""The `replay` engine: reference_impl's Marconi-style trace replayer in-process; records are *modelled*.

Each trial replays its rows in send order through one policy's cache (``reference_impl.replay``): lookup of
the input tokens, then admission of input + recorded output, strictly one request at a time, as Marconi's
simulator does. Cached tokens come from that cache; times come from Marconi's own TTFT model (a line fitted
to Jamba-1.5-Mini prefill latency on 4xA100, Marconi, arXiv 2411.19379), so TTFT is a function of the
uncached tokens only: modelled, never measured. This is the one engine with Marconi's trees (its admission,
its SGLang+ and vLLM+ baselines), beside SGLang's (``lru``, ``seglen``) on the same byte budget.
"""

from __future__ import annotations

from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.engines.arm_table import ArmTable, nothing
from hybridbench.engines.base import EngineInfo, TrialContext
from hybridbench.engines.kv_pool import KVPool
from hybridbench.engines.traits import EngineTraits
from hybridbench.errors import ConfigError
from hybridbench.plan.types import RunPlan
from hybridbench.records.build import RequestOutcome, trial_record
from hybridbench.records.schema import DETERMINISTIC_HITS, CacheState
from reference_impl.models import get_model
from reference_impl.policies.registry import POLICIES, make_replay_cache
from reference_impl.replay.api import ReplayCache, ReplayConfig
from workloads.trace import TraceRow

__all__ = ["REPLAY_ARMS", "ReplayEngine", "marconi_ttft_ms"]

# Every policy the replayer knows; strategy matters only to SGLang's tree (lru, seglen).
REPLAY_ARMS: ArmTable[None, str] = ArmTable(
    engine="replay",
    strategies={"no_buffer": nothing, "extra_buffer": nothing, "extra_buffer_lazy": nothing},
    policies=dict.fromkeys(POLICIES, nothing),
    host_tier=None,
    why_not={"disabled": "arm {arm}: engine {engine} replays a cache; a cache-off arm hits nothing by definition"},
)

# Marconi's plotting/ttft.py: an OLS line over its Jamba-1.5-Mini profile (in units of 10 ms), read at the
# first 50-token grid point strictly above the length, capped at the profile's last point (31,950).
_TTFT_SLOPE, _TTFT_INTERCEPT, _TTFT_STEP, _TTFT_LAST = 0.0052964387, 1.7813577, 50, 31_950


def marconi_ttft_ms(uncached_tokens: int) -> float:
    grid = min((uncached_tokens // _TTFT_STEP + 1) * _TTFT_STEP, _TTFT_LAST)
    return 10.0 * (_TTFT_SLOPE * grid + _TTFT_INTERCEPT)


class ReplayEngine:
    name = "replay"
    traits = EngineTraits(counters=frozenset({"evicted_states"}))  # no server: no probe can be served

    def __init__(self) -> None:
        self._configs: dict[str, ReplayConfig] = {}
        self._policies: dict[str, str] = {}
        self._model = ""

    def validate(self, cfg: RunCfg, plan: RunPlan) -> None:
        e = cfg.engine
        if not e.capacity_bytes > 0:
            raise ConfigError("engine.capacity_bytes: the replay engine needs a cache budget in bytes (e.g. 4e10)")
        try:
            model = get_model(cfg.model.name, temporal_dtype=cfg.model.mamba_ssm_dtype)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"engine replay: {exc.args[0]}") from None
        self._model = model.name
        for spec in plan.arm_specs:
            REPLAY_ARMS.express(spec, None)
            if spec.policy in ("lru", "seglen") and spec.strategy == "no_buffer" and e.page_size != 1:
                raise ConfigError(f"arm {spec.name} uses no_buffer, which needs page size 1; engine.page_size is "
                                  f"{e.page_size}")
            self._policies[spec.name] = spec.policy
            self._configs[spec.name] = ReplayConfig(
                capacity_bytes=int(e.capacity_bytes), model=model,
                strategy="no_buffer" if spec.strategy == "disabled" else spec.strategy,
                page_size=e.page_size, eff_weight=spec.knobs.eff_weight,
                chunked_prefill_size=e.chunked_prefill_size, track_interval=e.track_interval,
            )
        try:  # a config the caches refuse is refused now, not in the first trial
            for name, config in self._configs.items():
                make_replay_cache(self._policies[name], config)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"engine replay: {exc.args[0] if exc.args else exc}") from None

    def _cache(self, arm: str) -> ReplayCache:
        return make_replay_cache(self._policies[arm], self._configs[arm])

    def kv_pool(self, cfg: RunCfg) -> KVPool | None:
        return None  # no pool that admits requests: only a cache budget in bytes (engine.capacity_bytes)

    def run_trial(self, cfg: RunCfg, ctx: TrialContext) -> dict[str, Any]:
        cache = self._cache(ctx.trial.arm)
        order = ctx.schedule.order()
        rows: list[TraceRow] = list(ctx.rows)
        if cfg.load.prime:  # the same requests once through a cache that then carries on, unrecorded
            for i in order:
                cache.lookup(rows[i].input_tokens)
                cache.admit(rows[i].input_tokens, rows[i].output_tokens)
        before = cache.stats()
        state: CacheState = "primed" if cfg.load.prime else "cold-flushed"
        for i in order:
            row = rows[i]
            hit = cache.lookup(row.input_tokens)
            cache.admit(row.input_tokens, row.output_tokens)
            sent = ctx.schedule.times_s[i]
            first = sent + marconi_ttft_ms(len(row.input_tokens) - hit) / 1000.0
            ctx.emit(trial_record(ctx.plan.fingerprint, ctx.trial, RequestOutcome(
                index=i, session_id=row.session_id, turn_id=row.turn_id, scheduled_s=sent, sent_s=sent,
                first_token_s=first, end_s=first, prompt_tokens=len(row.input_tokens),
                output_tokens=len(row.output_tokens), cached_tokens=hit, status="ok",
            ), state, modelled=True))
        after = cache.stats()
        # KV tokens evicted are not counted by every replay tree; states are, by all of them.
        return {
            "crashes": 0,
            "capacity_bytes": int(cfg.engine.capacity_bytes),
            "states_admitted": after.states_admitted - before.states_admitted,
            "evicted_states": after.states_evicted - before.states_evicted,
            # Only a trace load's order is the trace's own whatever the trial's arrival seed (the checks may then
            # take one repeat's hits as every repeat's); other loads are left to their repeats' agreement.
            DETERMINISTIC_HITS: ctx.schedule.kind == "trace",
            **{f"policy_{k}": v for k, v in after.notes},
        }

    def info(self) -> EngineInfo:
        return EngineInfo(name="replay", version="reference_impl",
                          extra={"model": self._model, "ttft": "Marconi's Jamba-1.5-Mini TTFT line (modelled)"})

    def close(self) -> None:
        return
