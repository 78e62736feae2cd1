"""ModelSpec byte and FLOP constants, checked against formulas written out independently."""

from __future__ import annotations

import pytest

from reference_impl.models import MODELS, ModelSpec, get_model, mamba_state_bytes_marconi

D, N = 4096, 128


def test_marconi_7b_state_and_kv_bytes_match_marconi_md() -> None:
    m = get_model("marconi-7b")
    per_layer = 2 * D * N + (2 * D + 2 * N) * 4 * 2
    assert per_layer == 1_116_160
    assert m.ssm_state_bytes_per_layer == per_layer == mamba_state_bytes_marconi(D, N)
    # Marconi's own assumption (2-byte conv and SSM state), not SGLang's float32 temporal state.
    assert m.with_temporal_dtype("float16") == m
    assert m.state_bytes() == 24 * 1_116_160 == 26_787_840
    assert m.kv_bytes_per_token() == 4 * 2 * D * 2 == 65_536
    # One checkpoint costs as much as 408.75 tokens of KV (Marconi, arXiv 2411.19379).
    assert m.state_bytes() / m.kv_bytes_per_token() == pytest.approx(408.75)


@pytest.mark.parametrize("x", [0, 1, 17, 1000, 32_768])
def test_marconi_7b_prefill_flops_is_marconis_metric(x: int) -> None:
    m = get_model("marconi-7b")
    f_attn = 8 * x * D**2 + 4 * x**2 * D
    f_mlp = 16 * x * D**2
    f_mamba = 12 * x * D**2 + 16 * x * D * N + 10 * x * D  # camera-ready formula
    expected = 24 * f_mamba + 4 * f_attn + 28 * f_mlp
    assert m.prefill_flops_int(x) == expected
    assert m.prefill_flops(x) == float(expected)
    assert m.attn_layer_flops(x) == f_attn
    assert m.mlp_layer_flops(x) == f_mlp
    assert m.ssm_layer_flops(x) == f_mamba


def test_layer_counts_follow_the_public_configs() -> None:
    nem = get_model("nemotron-h-8b")
    pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    assert len(pattern) == 52
    assert (nem.num_ssm_layers, nem.num_attn_layers, nem.num_mlp_layers) == (24, 4, 24)
    qwen = get_model("qwen3-next-80b-a3b")
    assert (qwen.num_ssm_layers, qwen.num_attn_layers, qwen.num_mlp_layers) == (36, 12, 48)


def test_bytes_of_the_public_models_as_sglang_stores_them() -> None:
    # SGLang's defaults (configs/mamba_utils.py:68-71): bf16 conv window, float32 temporal state.
    nem = get_model("nemotron-h-8b")
    assert nem.dtype_bytes == 2
    assert nem.kv_bytes_per_token() == 4 * 2 * (8 * 128) * 2
    # conv (8192 + 2·8·128 channels × 3 columns, bf16) + SSM state (128 heads × 64 × 128, fp32).
    assert nem.state_bytes() == 24 * (10240 * 3 * 2 + 128 * 64 * 128 * 4)
    qwen = get_model("qwen3-next-80b-a3b")
    assert qwen.kv_bytes_per_token() == 12 * 2 * (2 * 256) * 2
    # conv over q, k, v (2·16·128 + 32·128 channels × 3, bf16) + delta-rule state 32 × 128 × 128 (fp32).
    assert qwen.state_bytes() == 36 * (8192 * 3 * 2 + 32 * 128 * 128 * 4) == 77_266_944
    # --mamba-ssm-dtype bfloat16: everything in 2 bytes, what ModelSpec used to assume.
    assert qwen.with_temporal_dtype("bfloat16").state_bytes() == 36 * (8192 * 3 + 32 * 128 * 128) * 2
    assert qwen.with_temporal_dtype("float16").state_bytes() == qwen.with_temporal_dtype("bfloat16").state_bytes()


def test_state_dtypes_are_sglangs_names() -> None:
    qwen = get_model("qwen3-next-80b-a3b")
    with pytest.raises(ValueError, match="'fp8' is not one of float32, bfloat16, float16"):
        qwen.with_temporal_dtype("fp8")
    with pytest.raises(ValueError, match="conv_dtype 'int4'"):
        ModelSpec(**{**{f: getattr(qwen, f) for f in qwen.__dataclass_fields__}, "conv_dtype": "int4"})


def _non_embedding_params(m: ModelSpec) -> int:
    return (
        m.num_attn_layers * m.attn_proj_params
        + m.num_ssm_layers * m.ssm_proj_params
        + m.num_mlp_layers * m.mlp_active_params
    )


def test_parameter_counts_are_consistent_with_model_names() -> None:
    # Nemotron-H-8B: ~8.1B params incl. 2 × 131072 × 4096 embeddings; Qwen3-Next-80B-A3B: ~3B active.
    assert 6.5e9 < _non_embedding_params(get_model("nemotron-h-8b")) < 7.5e9
    assert 2.5e9 < _non_embedding_params(get_model("qwen3-next-80b-a3b")) < 3.6e9


@pytest.mark.parametrize("name", sorted(MODELS))
def test_attention_makes_prefill_superlinear(name: str) -> None:
    m = get_model(name)
    assert m.prefill_flops(0) == 0
    assert m.prefill_flops(2000) > 2 * m.prefill_flops(1000)
    # Only attention is quadratic: removing it makes the cost exactly linear.
    lin = m.prefill_flops_int(1000) - m.num_attn_layers * 4 * 1000**2 * m.attn_q_dim
    lin2 = m.prefill_flops_int(2000) - m.num_attn_layers * 4 * 2000**2 * m.attn_q_dim
    assert lin2 == 2 * lin


def test_unknown_model_lists_valid_names() -> None:
    with pytest.raises(KeyError) as exc:
        get_model("llama")
    for name in MODELS:
        assert name in str(exc.value)


# -- Qwen3.5 and Jamba-1.5 specs, from their public config.json ---------------------------------


def _total_params(m: ModelSpec) -> int:
    """Every weight matrix: active layers, the routed experts not in use, embedding and untied LM head."""
    idle_experts = m.num_mlp_layers * (m.moe_num_experts - m.moe_experts_per_token) * m.moe_expert_params
    return _non_embedding_params(m) + idle_experts + 2 * m.vocab_size * m.d_model


def test_qwen3_5_and_jamba_layer_counts() -> None:
    q9 = get_model("qwen3.5-9b")
    assert (q9.num_ssm_layers, q9.num_attn_layers, q9.num_mlp_layers) == (24, 8, 32)
    q122 = get_model("qwen3.5-122b-a10b")
    assert (q122.num_ssm_layers, q122.num_attn_layers, q122.num_mlp_layers) == (36, 12, 48)
    jamba = get_model("jamba-1.5-mini")
    # attn_layer_offset 4, period 8 over 32 layers: attention at 4, 12, 20, 28.
    assert [i for i in range(32) if i % 8 == 4] == [4, 12, 20, 28]
    assert (jamba.num_ssm_layers, jamba.num_attn_layers, jamba.num_mlp_layers) == (28, 4, 32)


def test_qwen3_5_and_jamba_kv_and_state_bytes() -> None:
    q9 = get_model("qwen3.5-9b")
    # 8 attention layers × K and V × 4 kv heads × head_dim 256 × bf16.
    assert q9.kv_bytes_per_token() == 8 * 2 * 4 * 256 * 2 == 32_768
    # conv over q, k, v (2·16·128 + 32·128 = 8192 channels × 3 columns, bf16) + 32 × 128 × 128 state (fp32:
    # the config's "mamba_ssm_dtype": "float32").
    assert q9.state_bytes() == 24 * (8192 * 3 * 2 + 32 * 128 * 128 * 4) == 51_511_296
    q122 = get_model("qwen3.5-122b-a10b")
    assert q122.kv_bytes_per_token() == 12 * 2 * 2 * 256 * 2 == 24_576
    # conv 2·16·128 + 64·128 = 12288 channels × 3 columns (bf16) + 64 × 128 × 128 state (fp32).
    # The recurrent part alone in fp32 is 150,994,944 bytes (cross-check from a public design note).
    assert q122.state_bytes() == 36 * 12288 * 3 * 2 + 150_994_944
    jamba = get_model("jamba-1.5-mini")
    assert jamba.kv_bytes_per_token() == 4 * 2 * 8 * 128 * 2 == 16_384
    # Mamba-1: d_inner = 2 · 4096 = 8192; 3 conv columns (bf16) + d_inner × d_state(16) (fp32).
    assert jamba.ssm_state_bytes_per_layer == 8192 * 3 * 2 + 8192 * 16 * 4 == 573_440
    assert jamba.state_bytes() == 28 * 573_440 == 16_056_320


def test_qwen3_5_9b_parameter_count() -> None:
    m = get_model("qwen3.5-9b")
    assert m.moe_num_experts == 0
    assert m.mlp_active_params == 3 * 4096 * 12288
    # Text tower of the published 9B checkpoint (9.65B incl. ~0.45B vision, ~0.24B MTP): ~8.95B.
    assert _total_params(m) == pytest.approx(8.95e9, rel=0.02)


def test_qwen3_5_122b_a10b_parameter_counts() -> None:
    m = get_model("qwen3.5-122b-a10b")
    assert m.moe_expert_params == 3 * 3072 * 1024 == 9_437_184
    # Non-routed matrix weights, independently derived from the same config: 6,145,327,104.
    routed_active = m.num_mlp_layers * m.moe_experts_per_token * m.moe_expert_params
    non_routed = _non_embedding_params(m) - routed_active + 2 * m.vocab_size * m.d_model
    assert non_routed == 6_145_327_104
    assert _total_params(m) == pytest.approx(122e9, rel=0.03)
    # "A10B": ~10B active with embeddings (9.77B), ~8.2B without.
    assert _non_embedding_params(m) + 2 * m.vocab_size * m.d_model == pytest.approx(10e9, rel=0.05)


def test_jamba_1_5_mini_parameter_counts() -> None:
    m = get_model("jamba-1.5-mini")
    expert = 3 * 4096 * 14336
    router = 4096 * 16
    # 16 dense MLP layers and 16 MoE layers (top-2 of 16 + router) folded into 32 averaged layers.
    assert m.num_mlp_layers * m.mlp_active_params == 16 * expert + 16 * (2 * expert + router)
    assert m.num_mlp_layers * m.moe_expert_params == 16 * expert
    assert (m.moe_num_experts, m.moe_experts_per_token) == (16, 2)
    # Published: 52B total, 12B active.
    assert _total_params(m) == pytest.approx(52e9, rel=0.03)
    assert _non_embedding_params(m) + 2 * m.vocab_size * m.d_model == pytest.approx(12e9, rel=0.03)


def test_jamba_cost_model_weights_match_layer_by_layer_count() -> None:
    from reference_impl.engine.cost_model import CostModel
    from reference_impl.engine.hardware import get_gpu

    m = get_model("jamba-1.5-mini")
    cm = CostModel(m, get_gpu("h100"))
    assert cm.total_weight_bytes() == _total_params(m) * 2
    # One decode step of a single request reads the dense weights plus two experts in each MoE layer.
    dense = _total_params(m) - 16 * 16 * 3 * 4096 * 14336
    assert cm.routed_weight_bytes(1) == pytest.approx(16 * 2 * 3 * 4096 * 14336 * 2)
    assert cm.decode_bytes([0]) == pytest.approx(
        (dense - 4096 * 65536 + 16 * 2 * 3 * 4096 * 14336) * 2 + 2 * m.state_bytes()
    )
