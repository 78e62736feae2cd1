"""Whether vLLM's host tier, sized in GiB (``arm.l2.host_tier_gb`` -> ``--kv-offloading-size``), still is what
SGLang's and TokenSpeed's l2 arm holds: ``arm.l2.hicache_ratio`` times the device KV pool.

The GPU configurations of l2, kl and accuracy pin 130 GiB, twice the device KV the default model leaves on 4 x H100
at 0.85. An override that moves the device pool (engine.tp, model, engine.mem_fraction_static, engine.gpu) leaves
the pin behind: on 8 x H100 the host tier is 0.62x the device pool (208 GiB) and cannot keep what the device evicts. The
device pool is the simulator's sizing (reference_impl.engine.sizing, SGLang's rule: per-rank KV heads copied past
TP = heads), every rank's share summed.
"""

from __future__ import annotations

from collections.abc import Sequence

from hybridbench.config.schema import RunCfg
from reference_impl.engine.arms import ArmSpec
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.sizing import engine_config
from reference_impl.models import get_model

__all__ = ["TOLERANCE", "device_kv_gib", "host_tier_warnings"]

TOLERANCE = 0.25  # a host tier within 25% of the ratio's size is the same arm
_GIB = 2**30


def device_kv_gib(cfg: RunCfg) -> float:
    """The device KV pool of this config, GiB over all ranks; KeyError or ValueError when the simulator cannot size
    it (a model or GPU it does not know, a model that does not fit)."""
    model = get_model(cfg.model.name, temporal_dtype=cfg.model.mamba_ssm_dtype)
    tp = cfg.engine.tp
    timer = CostModel(model, get_gpu(cfg.engine.gpu), tp=tp, quantization=cfg.model.quantization)
    arm = ArmSpec(name="branching", strategy="extra_buffer")
    pools = engine_config(arm, timer, mem_fraction_static=cfg.engine.mem_fraction_static,
                          kv_tokens=cfg.engine.kv_tokens or None, state_slots=cfg.engine.max_mamba_cache_size or None,
                          page_size=cfg.engine.page_size)
    return pools.kv_tokens * model.kv_bytes_per_token_per_rank(tp) * tp / _GIB


def host_tier_warnings(cfg: RunCfg, specs: Sequence[ArmSpec]) -> list[str]:
    """One line per vLLM host-tier arm whose arm.l2.host_tier_gb is off its ratio's size by more than TOLERANCE."""
    tiered = [s for s in specs if s.host_tier and s.knobs.l2 is not None and s.knobs.l2.host_tier_gb > 0]
    if cfg.engine.name != "vllm" or not tiered:
        return []
    try:
        device = device_kv_gib(cfg)
    except (KeyError, ValueError):
        return []  # not sizable here: nothing to compare with
    out = []
    for spec in tiered:
        assert spec.knobs.l2 is not None
        gb, ratio = spec.knobs.l2.host_tier_gb, spec.knobs.l2.hicache_ratio
        want = ratio * device
        if device > 0 and abs(gb / want - 1) > TOLERANCE:
            e = cfg.engine
            out.append(f"arm {spec.name}: arm.l2.host_tier_gb={gb:g} (vLLM --kv-offloading-size, GiB) is "
                       f"{gb / device:.2g}x the device KV this config leaves ({device:.0f} GiB on {e.tp} x {e.gpu} at "
                       f"{e.mem_fraction_static:g} for {cfg.model.name}, the simulator's sizing), where SGLang's and "
                       f"TokenSpeed's l2 arm holds {ratio:g}x (arm.l2.hicache_ratio): set "
                       f"arm.l2.host_tier_gb={want:.0f}")
    return out
