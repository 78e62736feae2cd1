"""The one registry of engine names: each maps to what runs its trials (the server trial runner around a
server engine's lifecycle, or the simulator)."""

from __future__ import annotations

from collections.abc import Callable

from hybridbench.engines.base import Engine
from hybridbench.engines.launchers import make_sglang_engine, make_vllm_engine
from hybridbench.engines.reference import REFERENCE
from hybridbench.engines.replay import ReplayEngine
from hybridbench.engines.server import ServerEngine
from hybridbench.engines.sim import SimEngine
from hybridbench.engines.tokenspeed import TokenSpeedEngine
from hybridbench.errors import ConfigError
from hybridbench.load.trial import ServerTrials

__all__ = ["ENGINES", "make_engine"]

ENGINES: dict[str, Callable[[], Engine]] = {
    "sim": SimEngine,
    "replay": ReplayEngine,
    "reference": lambda: ServerTrials(ServerEngine(REFERENCE)),
    "sglang": lambda: ServerTrials(make_sglang_engine()),
    "vllm": lambda: ServerTrials(make_vllm_engine()),
    "tokenspeed": lambda: ServerTrials(TokenSpeedEngine()),
}


def make_engine(name: str) -> Engine:
    if name in ENGINES:
        return ENGINES[name]()
    raise ConfigError(f"engine={name}: unknown engine; choose one of {', '.join(ENGINES)}")
