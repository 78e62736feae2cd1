"""Pool sizes and the engine config for an arm on a model × GPU × TP, the way SGLang sizes them.

Without ``--max-mamba-cache-size``, SGLang gives the recurrent states ``r / (1 + r)`` of the memory
left after weights (``r = --mamba-full-memory-ratio``, 0.9) and the KV pool the rest
(SGLang's pool sizing). A slot is ``ModelSpec.state_bytes`` (``mamba_cache_per_req``: conv in its
dtype + temporal in its, SGLang's MambaPool allocates both ``size + 1`` deep, mem_cache/memory_pool.py:722-752 in
0.5.23). 0.5.23 budgets that padding slot: ``K = (budget - slot) // slot`` states, ``(K + 1) · slot`` bytes taken
from the KV's share (mem_cache/kv_cache_configurator.py:3383, :3406); 0.5.16 did not (``budget // slot``, :1789).
extra_buffer's ping-pong slots are ordinary slots of the pool: they change how many a request holds
(``core.state_ratio``), not the bytes of one.
"""

from __future__ import annotations

from reference_impl.engine.arms import ArmSpec
from reference_impl.engine.config import EngineConfig, state_ratio
from reference_impl.engine.cost_model import CostModel

__all__ = ["MAMBA_FULL_MEMORY_RATIO", "engine_config"]

MAMBA_FULL_MEMORY_RATIO = 0.9


def engine_config(
    arm: ArmSpec,
    timer: CostModel,
    *,
    mem_fraction_static: float = 0.85,
    kv_tokens: int | None = None,
    state_slots: int | None = None,
    host_kv_tokens: int | None = None,
    chunked_prefill_size: int = 8192,
    max_running_requests: int | None = None,
    schedule_policy: str = "fcfs",
    page_size: int = 1,
    track_interval: int = 256,
    eff_weight: float | None = None,
    hicache_ratio: float | None = None,
) -> EngineConfig:
    """ValueError names the problem when the model does not fit or an arm cannot run.

    ``eff_weight``: the seglen/marconi policy weight (None: the policy's default). ``hicache_ratio``: host
    pools as a multiple of the device pools, as SGLang's ``--hicache-ratio`` sizes them (None: host KV
    ``host_kv_tokens`` or 4x the device pool, one host state slot per 1024 host tokens)."""
    if arm.strategy == "no_buffer" and page_size != 1:
        raise ValueError(f"arm {arm.name} (no_buffer) requires page size 1, as SGLang asserts")
    model, gpu = timer.model, timer.gpu
    budget = gpu.hbm_bytes * timer.tp * mem_fraction_static - timer.total_weight_bytes()
    if budget <= 0 and not (kv_tokens and state_slots):
        raise ValueError(
            f"{model.name} does not fit on {timer.tp} x {gpu.name} at memory fraction {mem_fraction_static}"
        )
    r = MAMBA_FULL_MEMORY_RATIO
    slot = model.state_bytes()
    slots = state_slots or int((budget * r / (1 + r) - slot) // slot)
    # Per rank, as SGLang sizes each rank's pool: the states split over TP, KV heads only down to one a rank (past
    # that they are copied), and the token count rounded down to whole pages (pool_configurator.py:642-646).
    per_rank = (budget - (slots + 1) * slot) / timer.tp
    kv = kv_tokens or int(per_rank // model.kv_bytes_per_token_per_rank(timer.tp)) // page_size * page_size
    if kv < 1 and state_slots:  # the slots asked for took the memory: say so, not "a KV pool of -154501544"
        raise ValueError(
            f"max_mamba_cache_size {state_slots:,}: {state_slots:,} state slots of {slot:,} B take "
            f"{(slots + 1) * slot / 2**30:,.1f} GiB of the {budget / 2**30:,.1f} GiB {model.name} leaves on "
            f"{timer.tp} x {gpu.name} at memory fraction {mem_fraction_static}: no memory for a KV pool; give fewer "
            "state slots (or the KV pool's size)"
        )
    host = (host_kv_tokens or 4 * kv) if arm.host_tier else 0
    host_slots = max(1, host // 1024) if host else 0
    if arm.host_tier and hicache_ratio is not None:
        if hicache_ratio <= 0:
            raise ValueError(f"hicache ratio must be > 0, got {hicache_ratio}")
        host, host_slots = max(1, int(kv * hicache_ratio)), max(1, int(slots * hicache_ratio))
    if schedule_policy not in ("fcfs", "lpm"):
        raise ValueError(f"unknown schedule policy {schedule_policy!r}; choose fcfs or lpm")
    config = EngineConfig(
        kv_tokens=kv,
        state_slots=slots,
        cache=arm.strategy,
        policy=arm.policy,
        page_size=page_size,
        chunked_prefill_size=chunked_prefill_size,
        max_running_requests=max_running_requests,
        schedule_policy=schedule_policy,  # type: ignore[arg-type]
        track_interval=track_interval,
        host_kv_tokens=host,
        host_state_slots=host_slots,
        eff_weight=eff_weight,
        mamba_chunk_size=model.mamba_chunk_size,
    )
    if slots < state_ratio(config):
        raise ValueError(f"{slots} state slots cannot hold one running request of arm {arm.name}")
    return config
