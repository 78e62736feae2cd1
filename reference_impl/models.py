"""Byte and FLOP models of hybrid (attention + SSM/linear-attention) LLMs for cache simulation.

Contract:

* A :class:`ModelSpec` is a flat, per-layer-uniform description: every attention layer is alike,
  every recurrent (Mamba2 / gated-delta-net) layer is alike, every MLP (dense or MoE) layer is
  alike. That is all a prefix cache needs: bytes of KV per token, bytes of one recurrent-state
  checkpoint, and the forward FLOPs a cache hit saves.
* FLOP counts are exact Python integers (``*_flops_int``) so that sums and ratios computed from
  them are bit-identical to Marconi's simulator, which also works in integers;
  :meth:`ModelSpec.prefill_flops` is the float view of the same number.
* FLOPs count multiply-adds as 2 (forward only). A linear layer costs ``2 · tokens · params``.
  Attention counts the score and value products non-causally (``4 · L² · q_dim``), exactly as
  Marconi's ``get_attn_flops`` does (``8LD² + 4L²D`` for D×D projections); softmax, norms,
  embeddings and the LM head are not counted.
* A recurrent state is a conv window plus a temporal (SSM / delta-rule) state, each in its own dtype, as
  SGLang stores them (``Mamba2StateDType(conv, temporal)``). The defaults are SGLang's (0.5.16 and 0.5.23
  alike, ``configs/mamba_utils.py:47-107``): conv bfloat16 (``SGLANG_MAMBA_CONV_DTYPE``, no server flag),
  temporal **float32** (line 71) unless the HF config sets ``mamba_ssm_dtype`` (``text_config`` first) and
  then ``SGLANG_MAMBA_SSM_DTYPE`` overrides both; ``--mamba-ssm-dtype {float32,bfloat16,float16}`` sets that
  variable (0.5.23 ``arg_groups/serving_hook.py:439``, 0.5.16 ``server_args.py:6645``). Qwen3-Next, Qwen3.5
  (whose config says ``"mamba_ssm_dtype": "float32"``) and Nemotron-H all pass their config
  (``configs/qwen3_next.py:312``, ``configs/nemotron_h.py:438``; Qwen3.5's text config subclasses
  Qwen3-Next's), so all serve with a float32 temporal state by default. :meth:`ModelSpec.with_temporal_dtype`
  is the flag.
* ``MODELS`` holds ``marconi-7b`` (Marconi's NVIDIA Attention-Mamba2 hybrid, fp16),
  ``nemotron-h-8b``, ``qwen3-next-80b-a3b``, ``qwen3.5-9b``, ``qwen3.5-122b-a10b`` and
  ``jamba-1.5-mini`` (bf16, from their public HF ``config.json``). Jamba alternates dense and MoE
  MLPs; its MLP fields are per-layer averages over all 32 MLP layers (see ``_jamba_1_5_mini``).
"""

from __future__ import annotations

from reference_impl.model_spec import STATE_DTYPES, ModelSpec

__all__ = ["MODELS", "STATE_DTYPES", "ModelSpec", "get_model", "mamba_state_bytes_marconi"]

def mamba_state_bytes_marconi(d: int, n: int, *, conv_kernel: int = 4, expand: int = 2, dtype_bytes: int = 2) -> int:
    """Marconi's ``get_mamba_state_size``: SSM state D×N plus conv state (expand·D + 2N)×kernel.

    Marconi models the SSM state as D×N (not expand·D×N) and keeps all ``conv_kernel`` conv
    columns, both in 2-byte elements; we keep that so ``marconi-7b`` capacities match its
    simulator byte for byte (its comparisons are on Marconi's assumption, not SGLang's float32).
    """
    return d * n * dtype_bytes + (expand * d + 2 * n) * conv_kernel * dtype_bytes


def _marconi_7b() -> ModelSpec:
    d, n = 4096, 128
    return ModelSpec(
        name="marconi-7b",
        d_model=d,
        dtype_bytes=2,
        num_attn_layers=4,
        attn_q_dim=d,
        attn_kv_dim=d,
        attn_proj_params=4 * d * d,  # 8LD² = 2·L·(Q, K, V, O each D×D)
        num_ssm_layers=24,
        ssm_proj_params=6 * d * d,  # 12LD²: in_proj D→4D and out_proj 2D→D
        ssm_token_flops=16 * d * n + 10 * d,  # camera-ready Mamba formula (utils.get_mamba1_flops)
        # Marconi's get_mamba_state_size (mamba_state_bytes_marconi): all fp16, whatever SGLang does.
        ssm_conv_elems_per_layer=(2 * d + 2 * n) * 4,
        ssm_temporal_elems_per_layer=d * n,
        conv_dtype="float16",
        temporal_dtype="float16",
        num_mlp_layers=28,
        mlp_active_params=8 * d * d,  # 16LD²: D→4D→D
        source="Marconi (arXiv 2411.19379) utils.py formulas; NVIDIA Attention-Mamba2 hybrid",
    )


def _nemotron_h_8b() -> ModelSpec:
    # nvidia/Nemotron-H-8B-Base-8K config.json: hidden_size 4096, num_hidden_layers 52,
    # hybrid_override_pattern "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    # (24 'M' Mamba2, 4 '*' attention, 24 '-' MLP), num_attention_heads 32, num_key_value_heads 8,
    # attention_head_dim 128, intermediate_size 21504 (relu2, non-gated), mamba_num_heads 128,
    # mamba_head_dim 64, ssm_state_size 128, n_groups 8, conv_kernel 4, expand 2, bfloat16.
    pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    hidden, heads, kv_heads, head_dim = 4096, 32, 8, 128
    m_heads, m_head_dim, n_state, groups, kernel = 128, 64, 128, 8, 4
    inner = m_heads * m_head_dim  # 8192 = expand · hidden
    conv_dim = inner + 2 * groups * n_state
    in_proj_out = 2 * inner + 2 * groups * n_state + m_heads  # z, x, B, C, dt
    dtype = 2
    return ModelSpec(
        name="nemotron-h-8b",
        d_model=hidden,
        dtype_bytes=dtype,
        num_attn_layers=pattern.count("*"),
        attn_q_dim=heads * head_dim,
        attn_kv_dim=kv_heads * head_dim,
        attn_kv_heads=kv_heads,
        attn_proj_params=hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden,
        num_ssm_layers=pattern.count("M"),
        ssm_proj_params=hidden * in_proj_out + inner * hidden,
        # conv over conv_dim channels + SSD scan counted like Marconi's 8·(expand·D)·N + gating.
        ssm_token_flops=2 * conv_dim * kernel + 8 * inner * n_state + 10 * inner,
        # SGLang's Mamba2StateShape.create: conv (conv_dim, kernel-1), temporal (heads, head_dim, N);
        # its defaults, bf16 conv and fp32 temporal (the config sets no mamba_ssm_dtype).
        ssm_conv_elems_per_layer=conv_dim * (kernel - 1),
        ssm_temporal_elems_per_layer=inner * n_state,
        conv_dtype="bfloat16",
        temporal_dtype="float32",
        num_mlp_layers=pattern.count("-"),
        mlp_active_params=2 * hidden * 21504,
        source="huggingface.co/nvidia/Nemotron-H-8B-Base-8K/blob/main/config.json",
        vocab_size=131072,
        mamba_chunk_size=128,  # its config's "chunk_size", which SGLang 0.5.16+ reads as mamba_chunk_size
    )


def _gated_delta_hybrid(
    name: str,
    source: str,
    *,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    lv_heads: int,
    vocab_size: int,
    dense_intermediate: int = 0,
    moe: tuple[int, int, int, int] | None = None,  # (experts, active, expert intermediate, shared intermediate)
) -> ModelSpec:
    """Qwen3-Next / Qwen3.5 geometry: gated-delta-net layers with gated full attention every 4th layer.

    Shared by the family: head_dim 256 with a q_proj that also emits an output gate, 16 linear key heads,
    key/value head dims 128, conv kernel 4, bf16. The MLP is dense SwiGLU or MoE with a shared expert.
    """
    interval, head_dim, lk_heads, lk_dim, lv_dim, kernel, dtype = 4, 256, 16, 128, 128, 4, 2
    key_dim, value_dim = lk_heads * lk_dim, lv_heads * lv_dim
    conv_dim = 2 * key_dim + value_dim  # q, k, v go through the causal conv
    n_attn = layers // interval
    if moe is None:
        mlp_active, moe_fields = 3 * hidden * dense_intermediate, {}  # SwiGLU gate, up, down
    else:
        experts, active, inter, shared = moe
        # SwiGLU experts (3 matrices): routed + shared, plus router and shared-expert gate.
        mlp_active = 3 * hidden * (active * inter + shared) + hidden * experts + hidden
        moe_fields = {"moe_num_experts": experts, "moe_experts_per_token": active,
                      "moe_expert_params": 3 * hidden * inter}
    return ModelSpec(
        name=name,
        d_model=hidden,
        dtype_bytes=dtype,
        num_attn_layers=n_attn,
        attn_q_dim=heads * head_dim,
        attn_kv_dim=kv_heads * head_dim,
        attn_kv_heads=kv_heads,
        attn_proj_params=hidden * (2 * heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden,
        num_ssm_layers=layers - n_attn,
        # in_proj_qkvz (q, k, v, z), in_proj_ba (beta, alpha per value head), out_proj.
        ssm_proj_params=hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * lv_heads + value_dim * hidden,
        # conv + delta-rule recurrence (~8 FLOPs per state element: decay, kᵀS, update, qS).
        ssm_token_flops=2 * conv_dim * kernel + 8 * lv_heads * lk_dim * lv_dim + 10 * value_dim,
        # SGLang's Mamba2StateShape.create (configs/qwen3_next.py:300-313): conv (conv_dim, kernel-1),
        # temporal (value heads, value dim, key dim); bf16 conv, fp32 temporal (Qwen3.5's config says float32).
        ssm_conv_elems_per_layer=conv_dim * (kernel - 1),
        ssm_temporal_elems_per_layer=lv_heads * lk_dim * lv_dim,
        conv_dtype="bfloat16",
        temporal_dtype="float32",
        num_mlp_layers=layers,
        mlp_active_params=mlp_active,
        source=source,
        vocab_size=vocab_size,
        **moe_fields,
    )


def _qwen3_next_80b_a3b() -> ModelSpec:
    # Qwen/Qwen3-Next-80B-A3B-Instruct config.json: hidden_size 2048, num_hidden_layers 48,
    # full_attention_interval 4 (36 gated-delta-net + 12 gated full-attention layers),
    # num_attention_heads 16, num_key_value_heads 2, head_dim 256 (q_proj also emits an output
    # gate of the same width), linear_num_key_heads 16, linear_num_value_heads 32,
    # linear_key_head_dim 128, linear_value_head_dim 128, linear_conv_kernel_dim 4,
    # num_experts 512, num_experts_per_tok 10, moe_intermediate_size 512,
    # shared_expert_intermediate_size 512, decoder_sparse_step 1 (MoE in every layer), bfloat16.
    return _gated_delta_hybrid(
        "qwen3-next-80b-a3b",
        "huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json",
        hidden=2048, layers=48, heads=16, kv_heads=2, lv_heads=32, vocab_size=151936, moe=(512, 10, 512, 512),
    )


def _qwen3_5_9b() -> ModelSpec:
    # Qwen/Qwen3.5-9B config.json text_config (huggingface.co/Qwen/Qwen3.5-9B/blob/main/config.json;
    # HF not reachable here, values read from public code that vendors the config: a test fixture
    # "run against the real Qwen3.5-9B config" (medrl, tests of medrl.model.probe), corroborated for
    # hidden/heads/kv/head_dim/intermediate by a Qwen3.5-9B shape contract (Rust, HIDDEN 4096,
    # N_HEADS 16, N_KV_HEADS 4, D_K 256, INTERMEDIATE 12288)): hidden_size 4096,
    # num_hidden_layers 32, layer_types ([linear_attention]*3 + [full_attention])*8
    # (full_attention_interval 4: 24 gated-delta-net + 8 gated full-attention layers),
    # num_attention_heads 16, num_key_value_heads 4, head_dim 256, attn_output_gate true,
    # linear_num_key_heads 16, linear_num_value_heads 32, linear_key_head_dim 128,
    # linear_value_head_dim 128, linear_conv_kernel_dim 4, intermediate_size 12288 (dense SwiGLU),
    # vocab_size 248320, tie_word_embeddings false. The vision tower and the MTP layer are left out.
    return _gated_delta_hybrid(
        "qwen3.5-9b",
        "huggingface.co/Qwen/Qwen3.5-9B/blob/main/config.json (text_config)",
        hidden=4096, layers=32, heads=16, kv_heads=4, lv_heads=32, vocab_size=248320, dense_intermediate=12288,
    )


def _qwen3_5_122b_a10b() -> ModelSpec:
    # Qwen/Qwen3.5-122B-A10B config.json text_config
    # (huggingface.co/Qwen/Qwen3.5-122B-A10B/blob/main/config.json; HF not reachable here, values
    # read from public code that hard-codes it: an Ascend NPU generate test's run_qwen3_5_moe_122B
    # config, an MLX MoE benchmark's CONFIGS["qwen3.5-122b-a10b"] = (3072, 1024, 256, 8), and a
    # design note deriving its geometry from this config, whose 6,145,327,104 non-routed matrix
    # weights and 12,288-channel conv history this spec reproduces exactly): hidden_size 3072,
    # num_hidden_layers 48, full_attention_interval 4 (36 gated-delta-net + 12 gated full-attention
    # layers), num_attention_heads 32, num_key_value_heads 2, head_dim 256 (q_proj also emits an
    # output gate), linear_num_key_heads 16, linear_num_value_heads 64, linear_key_head_dim 128,
    # linear_value_head_dim 128, linear_conv_kernel_dim 4, num_experts 256, num_experts_per_tok 8,
    # moe_intermediate_size 1024, shared_expert_intermediate_size 1024, decoder_sparse_step 1
    # (MoE in every layer), vocab_size 248320. Vision tower and MTP layer left out.
    return _gated_delta_hybrid(
        "qwen3.5-122b-a10b",
        "huggingface.co/Qwen/Qwen3.5-122B-A10B/blob/main/config.json (text_config)",
        hidden=3072, layers=48, heads=32, kv_heads=2, lv_heads=64, vocab_size=248320, moe=(256, 8, 1024, 1024),
    )


def _jamba_1_5_mini() -> ModelSpec:
    # ai21labs/AI21-Jamba-1.5-Mini config.json
    # (huggingface.co/ai21labs/AI21-Jamba-1.5-Mini/blob/main/config.json; HF not reachable here,
    # values read from a copy of it hard-coded, with that link, in get_ai21_jamba_15_mini of
    # github.com/sdpython/experimental-experiment experimental_experiment/torch_models/
    # llm_model_helper.py; attention/Mamba/MoE fields also match an independent Jamba test
    # fixture): hidden_size 4096,
    # num_hidden_layers 32, attn_layer_period 8, attn_layer_offset 4 (attention at layers 4, 12,
    # 20, 28; the other 28 are Mamba-1), num_attention_heads 32, num_key_value_heads 8 (no head_dim
    # key: 4096 / 32 = 128), mamba_d_state 16, mamba_d_conv 4, mamba_expand 2, mamba_dt_rank 256,
    # mamba_proj_bias false, expert_layer_period 2, expert_layer_offset 1 (MoE at odd layers, dense
    # MLP at even ones), num_experts 16, num_experts_per_tok 2, intermediate_size 14336 (SwiGLU,
    # dense MLP and every expert), vocab_size 65536, tie_word_embeddings false, bfloat16.
    # Published size (AI21 model card / arXiv 2408.12570): 52B total, 12B active.
    hidden, layers = 4096, 32
    attn_period, attn_offset, expert_period, expert_offset = 8, 4, 2, 1
    heads, kv_heads = 32, 8
    head_dim = hidden // heads
    n_state, kernel, expand, dt_rank = 16, 4, 2, 256
    intermediate, num_experts, experts_active = 14336, 16, 2
    inner = expand * hidden  # 8192
    n_attn = sum(1 for i in range(layers) if i % attn_period == attn_offset)
    n_moe = sum(1 for i in range(layers) if i % expert_period == expert_offset)
    n_dense = layers - n_moe
    expert = 3 * hidden * intermediate  # one SwiGLU expert, same shape as the dense MLP
    # ModelSpec has one kind of MLP layer; Jamba alternates dense and MoE (16 each). Every MLP field
    # is the per-layer average over all 32 MLP layers, which keeps the products the FLOP and cost
    # models take exact: 32 · mlp_active_params = 16 · dense + 16 · (2 experts + router), and
    # 32 · moe_expert_params = 16 · one expert (so moe_expert_params is *half* an expert's weights).
    dense_total = n_dense * expert
    moe_active_total = n_moe * (experts_active * expert + hidden * num_experts)
    dtype = 2
    return ModelSpec(
        name="jamba-1.5-mini",
        d_model=hidden,
        dtype_bytes=dtype,
        num_attn_layers=n_attn,
        attn_q_dim=heads * head_dim,
        attn_kv_dim=kv_heads * head_dim,
        attn_kv_heads=kv_heads,
        attn_proj_params=hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden,
        num_ssm_layers=layers - n_attn,
        # Mamba-1: in_proj D→2·inner (x, z), x_proj inner→dt_rank+2N, dt_proj dt_rank→inner,
        # out_proj inner→D.
        ssm_proj_params=hidden * 2 * inner + inner * (dt_rank + 2 * n_state) + dt_rank * inner + inner * hidden,
        # depthwise conv over inner channels + selective scan counted like Marconi's 8·inner·N + gating.
        ssm_token_flops=2 * inner * kernel + 8 * inner * n_state + 10 * inner,
        # conv_kernel-1 conv columns of inner channels + the inner × d_state SSM state (SGLang's
        # Mamba2StateShape.create_full_rank layout for Mamba-1). SGLang does not serve Jamba; its generic
        # defaults (bf16 conv, fp32 temporal) apply as they would to its other Mamba-1 models.
        ssm_conv_elems_per_layer=inner * (kernel - 1),
        ssm_temporal_elems_per_layer=inner * n_state,
        conv_dtype="bfloat16",
        temporal_dtype="float32",
        num_mlp_layers=layers,
        mlp_active_params=(dense_total + moe_active_total) // layers,
        source="huggingface.co/ai21labs/AI21-Jamba-1.5-Mini/blob/main/config.json",
        moe_num_experts=num_experts,
        moe_experts_per_token=experts_active,
        moe_expert_params=n_moe * expert // layers,
        vocab_size=65536,
    )


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        _marconi_7b(),
        _nemotron_h_8b(),
        _qwen3_next_80b_a3b(),
        _qwen3_5_9b(),
        _qwen3_5_122b_a10b(),
        _jamba_1_5_mini(),
    )
}


def get_model(name: str, *, temporal_dtype: str = "") -> ModelSpec:
    """Look a model up by name; an unknown name raises ``KeyError`` listing the valid ones.

    ``temporal_dtype``: SGLang's ``--mamba-ssm-dtype`` ("" = the model's default); ValueError if not a choice."""
    try:
        model = MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; valid names: {', '.join(sorted(MODELS))}") from None
    return model.with_temporal_dtype(temporal_dtype) if temporal_dtype else model
