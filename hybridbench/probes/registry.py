"""The one registry of post-trial probes, and the plan-time choice of which run."""

from __future__ import annotations

from hybridbench.config.schema import RunCfg
from hybridbench.engines.traits import EngineTraits
from hybridbench.errors import ConfigError
from hybridbench.probes.accuracy import Accuracy
from hybridbench.probes.base import Probe
from hybridbench.probes.exact_hits import ExactHits
from hybridbench.probes.kl import Kl

__all__ = ["PROBES", "plan_probes"]

# In the order they run after a trial: exact_hits only reads /server_info, kl flushes the cache, accuracy
# flushes it and asks its questions after an arm's last trial.
PROBES: dict[str, Probe] = {
    "exact_hits": ExactHits(),
    "kl": Kl(),
    "accuracy": Accuracy(),
}


def plan_probes(cfg: RunCfg, engine: str, traits: EngineTraits) -> tuple[Probe, ...]:
    """The probes this run wants; a wanted probe the engine cannot serve is a ConfigError naming both."""
    planned = []
    for probe in PROBES.values():
        why = probe.wanted(cfg)
        if not why:
            continue
        unmet = probe.needs.unmet(traits)
        if unmet:
            raise ConfigError(f"probe {probe.name} ({why}) needs {' and '.join(unmet)}; "
                              f"engine {engine} cannot serve it")
        planned.append(probe)
    return tuple(planned)
