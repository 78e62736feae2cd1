"""The registry that names every strategy (``no_buffer``, ``extra_buffer``, ``extra_buffer_lazy``, ``tokenspeed``,
``disabled``)."""

from __future__ import annotations

from reference_impl.lifecycle.strategies import (
    DisabledStrategy,
    ExtraBufferLazyStrategy,
    ExtraBufferStrategy,
    NoBufferStrategy,
)
from reference_impl.lifecycle.strategy import Strategy
from reference_impl.lifecycle.tokenspeed import TokenSpeedStrategy
from reference_impl.radix.tree import MambaRadixTree

__all__ = ["STRATEGIES", "make_strategy"]

STRATEGIES: dict[str, type[Strategy]] = {
    s.name: s
    for s in (NoBufferStrategy, ExtraBufferStrategy, ExtraBufferLazyStrategy, TokenSpeedStrategy, DisabledStrategy)
}


def make_strategy(name: str, tree: MambaRadixTree, **kwargs: object) -> Strategy:
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise KeyError(f"unknown strategy {name!r}; choose one of {', '.join(sorted(STRATEGIES))}") from None
    return cls(tree, **kwargs)  # type: ignore[arg-type]
