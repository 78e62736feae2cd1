"""One-shot α tuning for Marconi's eviction (Marconi, arXiv 2411.19379).

Contract: :func:`tune_alpha` replays the logged requests 1..W from an empty cache once per
α ∈ {0.0, 0.1, …, 2.0} (fixed α, no nested tuning, same mode and capacity), scores each replay
by the FLOPs its hits save over its last ``tuning_interval`` requests
(``Σ L_ssm·F_ssm(x) + L_attn·F_attn(x) + L_mlp·F_mlp(x)``, exact integers), and returns the α with
the highest score; exact ties go to the smallest α (Marconi keeps whichever worker finished
first, which is not deterministic).

All replays agree until their first eviction, so the common prefix is replayed once and the
cache is cloned at that point; each α then continues from its own copy. The result is identical
to 21 independent replays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from reference_impl.models import ModelSpec

__all__ = ["ALPHA_GRID", "Replayable", "replay_score", "tune_alpha"]

# k/10 is the correctly rounded double of each decimal literal Marconi lists (0.1, 0.2, …).
ALPHA_GRID: tuple[float, ...] = tuple(k / 10 for k in range(21))

Requests = Sequence[tuple[bytes, int]]  # (input + output, input length) from marconi.tree.pack_request


class Replayable(Protocol):
    """What the tuner needs from a fixed-α cache (``MarconiCache`` provides it)."""

    model: ModelSpec
    tuning_interval: int
    reused_history: list[int]

    def lookup_packed(self, seq: bytes, input_len: int) -> int: ...
    def admit_packed(self, seq: bytes, input_len: int) -> None: ...
    def replay_until_first_eviction(self, requests: Requests) -> int | None: ...
    def clone_paused(self, alpha: float) -> Replayable: ...
    def resume_admit(self) -> None: ...


def replay_score(cache: Replayable, requests: Requests, start: int = 0) -> int:
    """Replay ``requests[start:]`` on ``cache`` and return FLOPs saved over its last interval."""
    for seq, input_len in requests[start:]:
        cache.lookup_packed(seq, input_len)
        cache.admit_packed(seq, input_len)
    window = cache.reused_history[-cache.tuning_interval :]
    model = cache.model
    return sum(model.prefill_flops_int(x) for x in window)


def tune_alpha(requests: Requests, fresh: Callable[[float], Replayable]) -> float:
    """Best α on ``requests``; ``fresh(alpha)`` builds an empty cache evicting with that α."""
    # Shared prefix: every α behaves identically until the first eviction decision.
    base = fresh(ALPHA_GRID[0])
    stop = base.replay_until_first_eviction(requests)
    if stop is None:
        return ALPHA_GRID[0]  # no eviction at all: every α scores the same, the smallest wins
    best_alpha = ALPHA_GRID[0]
    best_score = -1
    for alpha in ALPHA_GRID:
        cache = base.clone_paused(alpha)
        cache.resume_admit()
        score = replay_score(cache, requests, stop + 1)
        if score > best_score:  # strict: the smallest α wins ties
            best_alpha, best_score = alpha, score
    return best_alpha
