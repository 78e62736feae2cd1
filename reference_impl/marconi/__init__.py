"""Marconi (MLSys 2025) hybrid prefix caching, reimplemented from its description.

``MarconiCache`` (Marconi and SGLang+ eviction over Marconi's admission) and ``VllmPlusCache``
(Marconi's block-granular vLLM+ baseline) implement :class:`reference_impl.replay.api.ReplayCache`.
"""

from reference_impl.marconi.cache import MarconiCache
from reference_impl.marconi.tuner import ALPHA_GRID, tune_alpha
from reference_impl.marconi.vllm_plus import VllmPlusCache

__all__ = ["ALPHA_GRID", "MarconiCache", "VllmPlusCache", "tune_alpha"]
