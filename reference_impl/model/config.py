"""Shape of the tiny hybrid model; every field is deterministic from ``seed``."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ModelConfig"]


@dataclass(frozen=True, slots=True)
class ModelConfig:
    vocab_size: int = 4096
    hidden: int = 64
    # One letter per layer: R = recurrent (gated delta rule + causal conv), A = full attention.
    # "RRRA" is Qwen3-Next's 3:1 mix at toy depth.
    layers: str = "RRRA"
    num_heads: int = 4  # attention heads
    head_dim: int = 16
    lin_heads: int = 4  # recurrent heads
    lin_head_dim: int = 16
    conv_kernel: int = 4
    mlp_hidden: int = 128
    max_context: int = 32768
    rope_theta: float = 10000.0
    eos_token_id: int = 256  # first id after the 256 byte tokens of the built-in tokenizer
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.layers or set(self.layers) - {"R", "A"}:
            raise ValueError(f"layer pattern must be a non-empty string of R and A, got {self.layers!r}")
        if self.vocab_size < 260:
            raise ValueError("vocab_size must be at least 260 (256 byte tokens + specials)")
        if self.conv_kernel < 2:
            raise ValueError("conv_kernel must be >= 2")

    @property
    def num_recurrent(self) -> int:
        return self.layers.count("R")

    @property
    def num_attention(self) -> int:
        return self.layers.count("A")

    @property
    def conv_channels(self) -> int:
        return 3 * self.lin_heads * self.lin_head_dim  # q, k, v pass through the short conv
