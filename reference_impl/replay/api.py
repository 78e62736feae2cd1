"""The interface every trace-replay cache implements, whatever tree it keeps inside.

The replayer (``python -m reference_impl.replay``) is Marconi-style and sequential: for each trace row
it calls ``lookup(input_tokens)`` (which returns how many leading input tokens are reused) and then
``admit(input_tokens, output_tokens)`` (the request was served; cache what the policy admits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from reference_impl.models import ModelSpec

__all__ = ["ReplayCache", "ReplayConfig", "ReplayStats"]


@dataclass(frozen=True, slots=True)
class ReplayStats:
    """Counters a cache reports after a replay (states are recurrent-state checkpoints)."""

    states_admitted: int
    states_evicted: int
    # Policy-specific facts worth printing (e.g. the tuned alpha); keys are stable snake_case names.
    notes: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """Everything a replay cache is built from; defaults are SGLang's and Marconi's."""

    capacity_bytes: int
    model: ModelSpec
    strategy: Literal["no_buffer", "extra_buffer", "extra_buffer_lazy"] = "no_buffer"
    page_size: int = 1
    eff_weight: float | None = None  # seglen weight, or Marconi's alpha (None: tune it)
    marconi_mode: Literal["faithful", "corrected"] = "faithful"
    bootstrap_multiplier: int = 5
    chunked_prefill_size: int | None = 8192
    track_interval: int = 256
    mamba_full_memory_ratio: float = 0.9  # SGLang's split of one byte budget into state and KV pools
    host_capacity_bytes: int = 0  # host (L2) tier budget, split like the device's; 0 = no host tier


class ReplayCache(Protocol):
    def lookup(self, input_tokens: Sequence[int]) -> int:
        """Reused prefix length in tokens for a request with these input tokens."""
        ...

    def admit(self, input_tokens: Sequence[int], output_tokens: Sequence[int]) -> None:
        """Record that the request was served: insert what the policy admits, evicting as needed."""
        ...

    def stats(self) -> ReplayStats: ...
