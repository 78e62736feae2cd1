"""A tiny hybrid (gated-delta recurrent + full attention) language model on CPU, float32, random weights.

It exists so the reference server computes real logits: a prefix-cache bug that hands a request the
wrong recurrent state or the wrong KV shows up as different logits, exactly as on a real model.
"""

from reference_impl.model.config import ModelConfig
from reference_impl.model.model import ExtendOut, HybridModel, RecState

__all__ = ["ExtendOut", "HybridModel", "ModelConfig", "RecState"]
