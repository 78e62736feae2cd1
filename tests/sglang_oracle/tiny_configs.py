"""Tiny ``config.json`` files, one per model architecture an experiment defaults to, for SGLang's start-up resolution on
a CPU (``prepare_server_args`` reads the model's config; no weights are loaded).

What the releases read while resolving: the architecture (which model hooks and mamba checks apply), the layer
types (which layers are linear attention), the linear-attention head shapes (the mamba cache's chunk size), the
attention heads (TP divisibility). Qwen3.5's dense checkpoints nest all of that in ``text_config``
(``sglang/srt/configs/qwen3_5.py``: Qwen3_5TextConfig subclasses Qwen3NextConfig) beside a vision tower.
"""

from __future__ import annotations

from typing import Any

# The text backbone both Qwen families share: 3 gated-delta layers and 1 full-attention layer.
_HYBRID_TEXT: dict[str, Any] = {
    "hidden_size": 128, "head_dim": 64, "intermediate_size": 256, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 4,  # divisible by the plans' TP 4
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_num_key_heads": 4, "linear_num_value_heads": 4, "linear_value_head_dim": 128,
    "max_position_embeddings": 4096, "partial_rotary_factor": 0.25, "rope_theta": 10000.0, "rms_norm_eps": 1e-06,
    "vocab_size": 1024, "torch_dtype": "bfloat16", "hidden_act": "silu", "tie_word_embeddings": False,
}

QWEN3_NEXT: dict[str, Any] = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", **_HYBRID_TEXT,
    "moe_intermediate_size": 64, "num_experts": 4, "num_experts_per_tok": 2, "shared_expert_intermediate_size": 64,
    "decoder_sparse_step": 1, "mlp_only_layers": [],
}

QWEN3_5: dict[str, Any] = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "tie_word_embeddings": False,
    "text_config": {"model_type": "qwen3_5_text", **_HYBRID_TEXT},
    "vision_config": {"depth": 1, "hidden_size": 64, "num_heads": 1, "intermediate_size": 64, "out_hidden_size": 128},
}

# Kimi-Linear: an MLA hybrid (SGLang 0.5.23's ModelConfig gives its architecture MLA), 3 KDA layers and 1 MLA layer
# (configs/kimi_linear.py: layers counted from 1). No conf/model has it; the start-up departures run DCP on it.
KIMI_LINEAR: dict[str, Any] = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "hidden_size": 128, "head_dim": 72,
    "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
    "q_lora_rank": None, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
    "mla_use_nope": True, "num_experts": 4, "num_experts_per_token": 2, "moe_intermediate_size": 64,
    "num_shared_experts": 1, "first_k_dense_replace": 1,
    "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4], "head_dim": 32, "num_heads": 4,
                           "short_conv_kernel_size": 4},
    "max_position_embeddings": 4096, "rope_theta": 10000.0, "rms_norm_eps": 1e-06, "vocab_size": 1024,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}

# conf/model/*.yaml ``architecture`` -> its tiny config. An experiment defaulting to a model not here fails the test.
BY_ARCHITECTURE: dict[str, dict[str, Any]] = {
    "Qwen3NextForCausalLM": QWEN3_NEXT,
    "Qwen3_5ForConditionalGeneration": QWEN3_5,
}
