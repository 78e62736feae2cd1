"""A tiny hybrid (gated-delta recurrent + full attention) language model on CPU, float32, random weights.

It exists so the reference server computes real logits: a prefix-cache bug that hands a request the
wrong recurrent state or the wrong KV shows up as different logits, exactly as on a real model.

The model itself (``reference_impl.model.model``) needs torch; its shapes (``reference_impl.model.config``) do not,
and the harness reads them on every plan, the simulator's and GPU engines' too. So the package imports the model
only when one of its names is asked for: planning a run never pays torch's start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from reference_impl.model.config import ModelConfig

if TYPE_CHECKING:
    from reference_impl.model.model import ExtendOut, HybridModel, RecState

__all__ = ["ExtendOut", "HybridModel", "ModelConfig", "RecState"]


def __getattr__(name: str) -> Any:
    if name in ("ExtendOut", "HybridModel", "RecState"):
        return getattr(importlib.import_module("reference_impl.model.model"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
