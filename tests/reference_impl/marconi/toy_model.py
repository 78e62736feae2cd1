"""The toy model the Marconi tests share: tiny integer sizes so byte budgets are easy to reason about."""

from __future__ import annotations

from reference_impl.models import ModelSpec

TOY = ModelSpec(
    name="toy",
    d_model=8,
    dtype_bytes=1,
    num_attn_layers=1,
    attn_q_dim=8,
    attn_kv_dim=1,
    attn_proj_params=64,
    num_ssm_layers=1,
    ssm_proj_params=96,
    ssm_token_flops=40,
    ssm_conv_elems_per_layer=0,
    ssm_temporal_elems_per_layer=25,  # 50 bytes of state per layer
    conv_dtype="float16",
    temporal_dtype="float16",
    num_mlp_layers=2,
    mlp_active_params=128,
)
