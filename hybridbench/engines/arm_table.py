"""Which arm specs an engine can express, and how: one table per engine.

An arm spec has three parts (``reference_impl.engine.arms.ArmSpec``): the cache strategy, the eviction policy
and the host tier. An engine's :class:`ArmTable` names, for each value of each part it supports, the function
that turns the spec (and the knobs it carries) into that engine's launch options. A part the table lacks is a
plan-time ConfigError naming the arm and the engine; the table never falls back to something else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hybridbench.errors import ConfigError
from reference_impl.engine.arms import ArmSpec, Strategy

__all__ = ["ArmTable", "Part", "nothing"]

C = TypeVar("C")  # what the engine needs besides the spec (its config, the installed server's --help, ...)
Opt = TypeVar("Opt")  # one launch option (a Flag, an EngineConfig keyword, ...)

Part = Callable[[ArmSpec, C], list[Opt]]


def nothing(spec: ArmSpec, ctx: object) -> list[Opt]:
    """A part the engine expresses by default (e.g. LRU eviction): no option at all."""
    return []


@dataclass(frozen=True, slots=True)
class ArmTable(Generic[C, Opt]):
    engine: str
    strategies: Mapping[Strategy, Part[C, Opt]]
    policies: Mapping[str, Part[C, Opt]]
    host_tier: Part[C, Opt] | None
    # strategy, policy or "host_tier" -> why it is missing ({arm} and {engine} are filled in)
    why_not: Mapping[str, str] = field(default_factory=dict)

    def check(self, spec: ArmSpec) -> None:
        """ConfigError naming the arm and this engine when a part of ``spec`` is not in the table."""
        if spec.strategy not in self.strategies:
            raise ConfigError(self.why_not.get(spec.strategy, "").format(arm=spec.name, engine=self.engine) or
                              f"arm {spec.name}: engine {self.engine} cannot express cache strategy {spec.strategy}")
        if spec.policy not in self.policies:
            raise ConfigError(self.why_not.get(spec.policy, "").format(arm=spec.name, engine=self.engine) or
                              f"arm {spec.name}: engine {self.engine} has no {spec.policy} eviction policy")
        if spec.host_tier and self.host_tier is None:
            raise ConfigError(self.why_not.get("host_tier", "").format(arm=spec.name, engine=self.engine) or
                              f"arm {spec.name}: engine {self.engine} has no host tier")

    def express(self, spec: ArmSpec, ctx: C) -> list[Opt]:
        """The options for ``spec``: its strategy's, then its policy's, then the host tier's."""
        self.check(spec)
        out = list(self.strategies[spec.strategy](spec, ctx))
        if spec.cache_on:  # with the cache off, eviction and the host tier do not apply
            out += self.policies[spec.policy](spec, ctx)
            if spec.host_tier and self.host_tier is not None:
                out += self.host_tier(spec, ctx)
        return out
