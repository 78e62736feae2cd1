"""Cache arms (DESIGN.md §2) as the reference engines express them: the one place arm names live.

An arm is a cache configuration; arms compose with ``+`` where that makes sense
(``branching+seglen``, ``branching+l2``). An arm this engine cannot express is an error naming
the arm, never a silent fallback.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["ARMS", "ArmSpec", "parse_arm"]

Strategy = Literal["disabled", "no_buffer", "extra_buffer"]


@dataclass(frozen=True, slots=True)
class ArmSpec:
    name: str
    strategy: Strategy
    policy: str = "lru"
    host_tier: bool = False


ARMS: dict[str, ArmSpec] = {
    a.name: a
    for a in (
        ArmSpec("disabled", "disabled"),  # --disable-radix-cache
        ArmSpec("lru", "no_buffer"),  # --mamba-radix-cache-strategy no_buffer
        ArmSpec("branching", "extra_buffer"),  # --mamba-radix-cache-strategy extra_buffer
        ArmSpec("seglen", "extra_buffer", policy="seglen"),  # as the seglen PR launches it
        ArmSpec("l2", "extra_buffer", host_tier=True),  # --enable-hierarchical-cache
    )
}

# Policies that bring their own tree (Marconi's) cannot run inside the scheduler's SGLang tree.
_UNEXPRESSIBLE = {
    "marconi": "the marconi arm needs Marconi's admission tree; use `python -m reference_impl.replay --policy marconi`",
}


def parse_arm(text: str) -> ArmSpec:
    """``branching+seglen+l2`` -> one ArmSpec; ValueError names an unknown or unexpressible part."""
    parts = [p.strip() for p in text.split("+") if p.strip()]
    if not parts:
        raise ValueError("empty arm name")
    spec: ArmSpec | None = None
    for part in parts:
        if part in _UNEXPRESSIBLE:
            raise ValueError(f"arm {part!r} cannot run on this engine: {_UNEXPRESSIBLE[part]}")
        if part not in ARMS:
            raise ValueError(f"unknown arm {part!r}; choose from {', '.join(ARMS)} (compose with '+')")
        base = ARMS[part]
        if spec is None:
            spec = base
            continue
        if "disabled" in (spec.name, base.name):
            raise ValueError(f"arm 'disabled' does not compose ({text!r})")
        strategy: Strategy = "extra_buffer" if "extra_buffer" in (spec.strategy, base.strategy) else "no_buffer"
        policy = base.policy if base.policy != "lru" else spec.policy
        spec = replace(spec, strategy=strategy, policy=policy, host_tier=spec.host_tier or base.host_tier)
    assert spec is not None
    return replace(spec, name="+".join(parts))
