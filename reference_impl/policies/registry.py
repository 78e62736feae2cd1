"""The one registry of cache-policy names.

Two kinds of entry share it. ``lru`` and ``seglen`` are eviction policies of the SGLang-model tree
(``reference_impl.radix``) and run under either strategy. ``marconi``, ``sglang_plus`` and
``vllm_plus`` are the policies of the Marconi paper, which bring their own tree with Marconi's
admission and byte-capacity semantics (``reference_impl.marconi``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reference_impl.policies.base import EvictionPolicy
from reference_impl.policies.lru import LRUPolicy
from reference_impl.policies.seglen import DEFAULT_EFF_WEIGHT, SeglenPolicy

if TYPE_CHECKING:
    from reference_impl.replay.api import ReplayCache, ReplayConfig

__all__ = ["POLICIES", "PolicyEntry", "get_policy", "make_policy", "make_replay_cache"]


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    name: str
    summary: str
    tree_policy: Callable[[float | None], EvictionPolicy] | None = None
    replay_cache: Callable[[ReplayConfig], ReplayCache] | None = None


def _marconi(eviction: str) -> Callable[[ReplayConfig], ReplayCache]:
    def build(config: ReplayConfig) -> ReplayCache:
        from reference_impl.marconi import MarconiCache  # noqa: PLC0415 - keeps the registry import light

        return MarconiCache(
            config.capacity_bytes,
            config.model,
            eviction="marconi" if eviction == "marconi" else "sglang_plus",
            mode=config.marconi_mode,
            eff_weight=config.eff_weight,
            bootstrap_multiplier=config.bootstrap_multiplier,
        )

    return build


def _vllm_plus(config: ReplayConfig) -> ReplayCache:
    from reference_impl.marconi import VllmPlusCache  # noqa: PLC0415

    return VllmPlusCache(config.capacity_bytes, config.model)


POLICIES: dict[str, PolicyEntry] = {
    e.name: e
    for e in (
        PolicyEntry("lru", "SGLang MambaRadixCache: LRU in both recency orders", tree_policy=lambda _w: LRUPolicy()),
        PolicyEntry(
            "seglen",
            "replay length to the nearest stateful ancestor + recency (SGLang PR #22172)",
            tree_policy=lambda w: SeglenPolicy(DEFAULT_EFF_WEIGHT if w is None else w),
        ),
        PolicyEntry("marconi", "Marconi: judicious admission + FLOP-aware eviction", replay_cache=_marconi("marconi")),
        PolicyEntry("sglang_plus", "Marconi's SGLang+ baseline: its admission, leaf LRU", replay_cache=_marconi("lru")),
        PolicyEntry("vllm_plus", "Marconi's vLLM+ baseline: 32-token blocks, a state each", replay_cache=_vllm_plus),
    )
}


def get_policy(name: str) -> PolicyEntry:
    try:
        return POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}") from None


def make_policy(name: str, eff_weight: float | None = None) -> EvictionPolicy:
    """An eviction policy for the SGLang-model tree."""
    entry = get_policy(name)
    if entry.tree_policy is None:
        raise KeyError(f"policy {name!r} brings its own tree and cannot drive the SGLang-model tree")
    return entry.tree_policy(eff_weight)


def make_replay_cache(name: str, config: ReplayConfig) -> ReplayCache:
    entry = get_policy(name)
    if entry.replay_cache is not None:
        return entry.replay_cache(config)
    from reference_impl.replay.sglang_cache import SGLangReplayCache  # noqa: PLC0415 - avoids an import cycle

    return SGLangReplayCache(config, make_policy(name, config.eff_weight))
