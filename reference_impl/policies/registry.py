"""The one place eviction-policy names for the SGLang-model tree are defined."""

from __future__ import annotations

from collections.abc import Callable

from reference_impl.policies.base import EvictionPolicy
from reference_impl.policies.lru import LRUPolicy
from reference_impl.policies.seglen import DEFAULT_EFF_WEIGHT, SeglenPolicy

__all__ = ["POLICIES", "make_policy"]

POLICIES: dict[str, Callable[[float | None], EvictionPolicy]] = {
    "lru": lambda _w: LRUPolicy(),
    "seglen": lambda w: SeglenPolicy(DEFAULT_EFF_WEIGHT if w is None else w),
}


def make_policy(name: str, eff_weight: float | None = None) -> EvictionPolicy:
    try:
        factory = POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown eviction policy {name!r}; choose one of {', '.join(sorted(POLICIES))}") from None
    return factory(eff_weight)
