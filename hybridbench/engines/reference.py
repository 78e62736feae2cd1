"""The ``reference`` engine: reference_impl's CPU server (a real process, HTTP), with SGLang's flag names."""

from __future__ import annotations

from hybridbench.engines.log_level import REFERENCE_LOG_READS
from hybridbench.engines.reference_cmd import lockstepped, reference_command, reference_kv_pool
from hybridbench.engines.server import ServerSpec
from hybridbench.engines.traits import COUNTERS, EngineTraits

__all__ = ["REFERENCE"]

REFERENCE = ServerSpec(
    name="reference", build=reference_command, client="sglang", package="hybridbench", gpus=False,
    kv_pool=reference_kv_pool, lockstep=lockstepped, log_reads=REFERENCE_LOG_READS,  # its batch lines, as SGLang's
    traits=EngineTraits(protocols=frozenset({"sglang", "openai"}), flushable=True, greedy_deterministic=True,
                        bitwise_reproducible=True, reference_semantics=True, counters=COUNTERS),
)
