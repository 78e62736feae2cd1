"""ModelSpec byte and FLOP constants, checked against formulas written out independently."""

from __future__ import annotations

import pytest

from reference_impl.models import MODELS, ModelSpec, get_model

D, N = 4096, 128


def test_marconi_7b_state_and_kv_bytes_match_marconi_md() -> None:
    m = get_model("marconi-7b")
    per_layer = 2 * D * N + (2 * D + 2 * N) * 4 * 2
    assert per_layer == 1_116_160
    assert m.ssm_state_bytes_per_layer == per_layer
    assert m.state_bytes() == 24 * 1_116_160 == 26_787_840
    assert m.kv_bytes_per_token() == 4 * 2 * D * 2 == 65_536
    # One checkpoint costs as much as 408.75 tokens of KV (marconi.md §2).
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


def test_bf16_bytes_of_the_public_models() -> None:
    nem = get_model("nemotron-h-8b")
    assert nem.dtype_bytes == 2
    assert nem.kv_bytes_per_token() == 4 * 2 * (8 * 128) * 2
    # conv (8192 + 2·8·128 channels × 3 columns) + SSM state (128 heads × 64 × 128).
    assert nem.state_bytes() == 24 * (10240 * 3 + 128 * 64 * 128) * 2
    qwen = get_model("qwen3-next-80b-a3b")
    assert qwen.kv_bytes_per_token() == 12 * 2 * (2 * 256) * 2
    # conv over q, k, v (2·16·128 + 32·128 channels × 3) + delta-rule state 32 × 128 × 128.
    assert qwen.state_bytes() == 36 * (8192 * 3 + 32 * 128 * 128) * 2


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
