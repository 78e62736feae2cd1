"""``ModelSpec``: a hybrid (attention + SSM/linear-attention) model reduced to the bytes and FLOPs a prefix cache
needs; the catalogue of real models is ``reference_impl.models``.

Contract:

* Flat and per-layer uniform: every attention layer is alike, every recurrent (Mamba2 / gated-delta-net) layer
  is alike, every MLP (dense or MoE) layer is alike: bytes of KV per token (per TP rank, as SGLang shards it),
  bytes of one recurrent-state checkpoint, and the forward FLOPs a cache hit saves.
* FLOP counts are exact Python integers (``*_flops_int``), bit-identical to Marconi's simulator, which also
  works in integers; :meth:`ModelSpec.prefill_flops` is the float view of the same number. Multiply-adds count
  2 (forward only); attention's score and value products are counted non-causally (``4 · L² · q_dim``), as
  Marconi's ``get_attn_flops``; softmax, norms, embeddings and the LM head are not counted.
* A recurrent state is a conv window plus a temporal state, each in its own dtype (``STATE_DTYPES``), as SGLang
  stores them; the defaults and the ``--mamba-ssm-dtype`` flag are described in ``reference_impl.models``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["STATE_DTYPES", "ModelSpec"]

# SGLang's state dtype names (``mamba2_state_dtype``'s dtype_map, the --mamba-ssm-dtype choices) -> bytes.
STATE_DTYPES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A hybrid model reduced to what byte capacities and FLOP savings need.

    Per-layer quantities (``*_params``, ``*_token_flops``, ``ssm_*_elems_per_layer``) are for
    one layer of that kind; the layer counts multiply them.
    """

    name: str
    d_model: int
    dtype_bytes: int
    # attention layers
    num_attn_layers: int
    attn_q_dim: int  # num_attention_heads · head_dim: width of the score and value products
    attn_kv_dim: int  # num_key_value_heads · head_dim: width of K (and of V) stored per token
    attn_proj_params: int  # q/k/v/o (and output-gate) projection weights of one layer
    # recurrent (SSM / linear-attention) layers
    num_ssm_layers: int
    ssm_proj_params: int  # in/out projection weights of one layer (the matmul part)
    ssm_token_flops: int  # non-matmul FLOPs per token of one layer (conv, scan, gating)
    ssm_conv_elems_per_layer: int  # conv window of one layer: conv channels · (kernel - 1) as SGLang keeps it
    ssm_temporal_elems_per_layer: int  # recurrent (temporal) state of one layer: heads · head_dim · state
    conv_dtype: str  # STATE_DTYPES name of the conv window (SGLang: bfloat16)
    temporal_dtype: str  # STATE_DTYPES name of the temporal state (SGLang: float32 unless configured)
    # MLP layers (dense, or MoE counted by *active* parameters per token)
    num_mlp_layers: int
    mlp_active_params: int
    source: str = ""
    # For the GPU cost model (reference_impl.engine.cost_model); zero where a model has none.
    moe_num_experts: int = 0  # routed experts per MoE layer (0: dense MLP)
    moe_experts_per_token: int = 0
    moe_expert_params: int = 0  # weights of one routed expert
    vocab_size: int = 0  # LM head (read every decode step); 0 where the FLOP model ignores it
    # SGLang's mamba cache chunk before the page size is taken into account: the config's mamba_chunk_size
    # (Nemotron-H's "chunk_size"), else FLA's CHUNK_SIZE, 64 (0.5.23 arg_groups/overrides.py mamba_cache_chunk_size).
    # extra_buffer checkpoints and branch points fall on its multiples.
    mamba_chunk_size: int = 64
    # num_key_value_heads: a TP rank holds max(1, heads // tp) of them (SGLang's ModelConfig.get_num_kv_heads), so
    # past as many ranks as heads K and V are copied, not split. 0: the heads split evenly at any TP (Marconi's).
    attn_kv_heads: int = 0

    def __post_init__(self) -> None:
        for key in ("conv_dtype", "temporal_dtype"):
            if getattr(self, key) not in STATE_DTYPES:
                raise ValueError(f"{self.name}: {key} {getattr(self, key)!r} is not one of {', '.join(STATE_DTYPES)}")

    def with_temporal_dtype(self, dtype: str) -> ModelSpec:
        """This model served with ``--mamba-ssm-dtype dtype`` (ValueError naming the choices otherwise)."""
        if dtype not in STATE_DTYPES:
            raise ValueError(f"mamba ssm dtype {dtype!r} is not one of {', '.join(STATE_DTYPES)} (SGLang's choices)")
        return replace(self, temporal_dtype=dtype)

    # -- bytes -------------------------------------------------------------------------------
    def kv_bytes_per_token(self) -> int:
        """K and V of one token over all attention layers."""
        return self.num_attn_layers * 2 * self.attn_kv_dim * self.dtype_bytes

    def kv_bytes_per_token_per_rank(self, tp: int) -> float:
        """K and V of one token on one of ``tp`` ranks: its KV heads (``max(1, heads // tp)``) over all attention
        layers; SGLang's cell size (``pool_configurator._compute_cell_size``), which sizes each rank's KV pool."""
        if self.attn_kv_heads <= 0:
            return self.kv_bytes_per_token() / tp
        head_dim = self.attn_kv_dim // self.attn_kv_heads
        return self.num_attn_layers * 2 * max(1, self.attn_kv_heads // tp) * head_dim * self.dtype_bytes

    @property
    def ssm_state_bytes_per_layer(self) -> int:
        """Conv window + temporal state of one layer, each in its dtype."""
        return (self.ssm_conv_elems_per_layer * STATE_DTYPES[self.conv_dtype]
                + self.ssm_temporal_elems_per_layer * STATE_DTYPES[self.temporal_dtype])

    def state_bytes(self) -> int:
        """One state slot (conv + temporal) over all SSM layers: SGLang's ``mamba_cache_per_req``
        (``configs/mamba_utils.py:116-125``), what one slot of its state pool holds."""
        return self.num_ssm_layers * self.ssm_state_bytes_per_layer

    # -- per-layer FLOPs of prefilling ``n`` tokens from scratch ------------------------------
    def attn_layer_flops(self, n: int) -> int:
        """Projections ``2·n·params`` plus QKᵀ and AV ``2·n²·q_dim`` each (non-causal, as Marconi)."""
        return 2 * n * self.attn_proj_params + 4 * n * n * self.attn_q_dim

    def mlp_layer_flops(self, n: int) -> int:
        """``2·n·active_params`` (for MoE: routed experts in use + shared expert + router)."""
        return 2 * n * self.mlp_active_params

    def ssm_layer_flops(self, n: int) -> int:
        """Projections ``2·n·params`` plus per-token conv/scan/gating work; linear in ``n``."""
        return 2 * n * self.ssm_proj_params + n * self.ssm_token_flops

    # -- whole-model FLOPs ---------------------------------------------------------------------
    def prefill_flops_int(self, num_tokens: int) -> int:
        """Exact ``L_ssm·F_ssm(x) + L_attn·F_attn(x) + L_mlp·F_mlp(x)`` for ``x = num_tokens``."""
        x = num_tokens
        return (
            self.num_ssm_layers * self.ssm_layer_flops(x)
            + self.num_attn_layers * self.attn_layer_flops(x)
            + self.num_mlp_layers * self.mlp_layer_flops(x)
        )

    def prefill_flops(self, num_tokens: int) -> float:
        """Forward FLOPs of prefilling ``num_tokens`` from scratch (what a hit of that length saves)."""
        return float(self.prefill_flops_int(num_tokens))
