"""The interface every trace-replay cache implements, whatever tree it keeps inside.

The replayer (``python -m reference_impl.replay``) is Marconi-style and sequential: for each trace row
it calls ``lookup(input_tokens)`` (which returns how many leading input tokens are reused) and then
``admit(input_tokens, output_tokens)`` (the request was served; cache what the policy admits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ReplayCache", "ReplayStats"]


@dataclass(frozen=True, slots=True)
class ReplayStats:
    """Counters a cache reports after a replay (states are recurrent-state checkpoints)."""

    states_admitted: int
    states_evicted: int
    # Policy-specific facts worth printing (e.g. the tuned alpha); keys are stable snake_case names.
    notes: tuple[tuple[str, float], ...] = ()


class ReplayCache(Protocol):
    def lookup(self, input_tokens: Sequence[int]) -> int:
        """Reused prefix length in tokens for a request with these input tokens."""
        ...

    def admit(self, input_tokens: Sequence[int], output_tokens: Sequence[int]) -> None:
        """Record that the request was served: insert what the policy admits, evicting as needed."""
        ...

    def stats(self) -> ReplayStats: ...
