"""The engine core's configuration: the pools, the cache, the scheduler's knobs, and what they imply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from reference_impl.lifecycle import STATES_PER_REQUEST_WITH_CACHE

__all__ = ["DEFAULT_KV_TOKENS", "EngineConfig", "fits_kv_pool", "state_ratio"]

DEFAULT_KV_TOKENS = 32768  # the reference server's KV pool without --max-total-tokens


def fits_kv_pool(input_tokens: int, max_new_tokens: int, kv_tokens: int) -> bool:
    """Whether one request can run at all: its prompt and every token it may generate (at least one) in the KV
    pool at once. A request that does not is rejected on arrival; the harness refuses such a plan with this test."""
    return input_tokens + max(1, max_new_tokens) <= kv_tokens


@dataclass(frozen=True, slots=True)
class EngineConfig:
    kv_tokens: int
    state_slots: int  # --max-mamba-cache-size
    cache: Literal["disabled", "no_buffer", "extra_buffer", "extra_buffer_lazy", "tokenspeed"] = "no_buffer"
    policy: str = "lru"
    eff_weight: float | None = None
    page_size: int = 1
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    max_running_requests: int | None = None
    schedule_policy: Literal["fcfs", "lpm"] = "fcfs"
    track_interval: int = 256
    overlap: bool = True
    host_kv_tokens: int = 0
    host_state_slots: int = 0
    host_kv_only: bool = False  # TokenSpeed's KV host tier without its Mamba one: host KV alone never hits
    init_new_token_ratio: float = 0.7
    min_new_token_ratio: float = 0.1
    new_token_ratio_decay: float = 0.001
    semantics: str = "0.5.23"  # which SGLang release's cache behaviour (reference_impl.radix.tree)
    # the model's (ModelSpec.mamba_chunk_size): extra_buffer's checkpoint grid with the page; 0.5.9 ignores it
    # (radix.tree.cache_chunk_size)
    mamba_chunk_size: int = 64

    def __post_init__(self) -> None:
        # TokenSpeed's pools evict by their own LRU (lifecycle/tokenspeed_pool.py) and never ask the tree's policy:
        # any other policy would be silently ignored, and a seglen-vs-LRU comparison would compare LRU with itself.
        if self.cache == "tokenspeed" and self.policy != "lru":
            raise ValueError(f"eviction policy {self.policy!r} cannot apply to TokenSpeed's cache, which evicts "
                             "least recently used by its own rules: use lru")
        if self.cache == "extra_buffer_lazy" and not self.overlap:
            raise ValueError("extra_buffer_lazy requires the overlap schedule (SGLang asserts it when sizing the pool)")
        if self.cache == "extra_buffer_lazy" and self.semantics == "0.5.9":
            raise ValueError("SGLang 0.5.9 has no extra_buffer_lazy (PR #27118 came with 0.5.16)")


def state_ratio(config: EngineConfig) -> int:
    """State slots SGLang reserves per running request (kv_cache_configurator._calculate_mamba_ratio)."""
    if config.cache == "disabled":
        return 1
    if config.cache == "extra_buffer":
        # the ping-pong pair: 2 with overlap, 1 without; 0.5.9 always adds 2 (MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP
        # unless speculative, model_executor/model_runner_kv_cache_mixin.py:355-362 in 0.5.9)
        return STATES_PER_REQUEST_WITH_CACHE + (2 if config.overlap or config.semantics == "0.5.9" else 1)
    if config.cache == "extra_buffer_lazy":
        return STATES_PER_REQUEST_WITH_CACHE + 1  # one ping-pong slot; the second is taken only at a boundary
    if config.cache == "tokenspeed":
        return 2  # TokenSpeed: a working state and a checkpoint per running request
    return STATES_PER_REQUEST_WITH_CACHE
