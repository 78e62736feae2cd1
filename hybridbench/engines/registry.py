"""The one registry of engine names."""

from __future__ import annotations

from collections.abc import Callable

from hybridbench.engines.base import Engine
from hybridbench.engines.launchers import make_sglang_engine, make_vllm_engine
from hybridbench.engines.reference_cmd import reference_command
from hybridbench.engines.server import ServerEngine
from hybridbench.engines.sim import SimEngine
from hybridbench.errors import ConfigError

__all__ = ["ENGINES", "make_engine"]

ENGINES: dict[str, Callable[[], Engine]] = {
    "sim": SimEngine,
    "reference": lambda: ServerEngine("reference", reference_command, api="sglang", package="hybridbench"),
    "sglang": make_sglang_engine,
    "vllm": make_vllm_engine,
}


def make_engine(name: str) -> Engine:
    if name in ENGINES:
        return ENGINES[name]()
    raise ConfigError(f"engine={name}: unknown engine; choose one of {', '.join(ENGINES)}")
