"""A ``load=`` group chosen on the command line that the experiment then replaced.

An experiment's sizing (conf/sizing/<experiment>/gpu.yaml) sets ``load.kind`` as a value, and values compose after
the group a command line picks: ``+experiment=seglen engine=sglang load=closed`` ran Poisson arrivals, and
``+experiment=l2 load=closed`` a trace replay, the user's choice dropped without a word. Values given on the command
line win over both, so the refusal says to give those.
"""

from __future__ import annotations

from collections.abc import Sequence

from hybridbench.errors import ConfigError

__all__ = ["refuse_replaced_load"]


def refuse_replaced_load(overrides: Sequence[str], load_kind: str) -> None:
    """ConfigError when ``overrides`` (Hydra's, as typed) pick a load group other than the ``load.kind`` composed.
    Each group option sets its own kind (conf/load/<kind>.yaml), so a differing kind is a choice replaced."""
    for item in overrides:
        key, eq, value = item.lstrip("+").partition("=")
        if key == "load" and eq and value and value != load_kind:
            raise ConfigError(f"load={value}: this configuration sets load.kind={load_kind} after the load group is "
                              f"chosen, so the run would not be a {value} load; give the values instead "
                              f"(load.kind={value}, and its load.* settings) on the command line, or drop load={value}")
