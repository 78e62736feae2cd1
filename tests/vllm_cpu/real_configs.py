"""The published config.json of each hybrid model hybridbench knows (conf/model), reduced to what vLLM reads to
resolve a serve config: written into a directory with the tiny Llama's tokenizer, so vLLM's own start-up
resolution runs on the real geometry offline (no weights: nothing past the config is loaded).

Values as reference_impl/models.py quotes them from each model's Hugging Face config.json; Qwen3.5's text config
carries ``"mamba_ssm_dtype": "float32"``, which vLLM's Qwen3.5 config hook reads. Not a test module.

vLLM 0.32.0's Qwen3.5 module imports its vision tower's image processor, which needs torchvision, left out of this
env (build_env.sh): a Qwen3.5 config resolves as its twin (:func:`resolvable`), its text geometry under
``Qwen3NextForCausalLM``, whose state shape and dtype functions are Qwen3.5's line for line (the test compares the
source), with Qwen3.5's own config hook applied after (it takes the state dtype from ``mamba_ssm_dtype``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

__all__ = ["REAL_CONFIGS", "TWINNED", "resolvable", "write_real_model"]

_GDN = {"linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4, "head_dim": 256, "full_attention_interval": 4}


def _qwen3_5_text(layers: int, hidden: int, heads: int, kv: int, lv: int, **mlp: Any) -> dict[str, Any]:
    return {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "linear_num_value_heads": lv, "mamba_ssm_dtype": "float32",
            "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * (layers // 4), "vocab_size": 248320,
            "max_position_embeddings": 262144, "dtype": "bfloat16", **_GDN, **mlp}


# hybridbench model name -> config.json
REAL_CONFIGS: dict[str, dict[str, Any]] = {
    "nemotron-h-8b": {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 4096,
        "num_hidden_layers": 52, "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "attention_head_dim": 128,
        "intermediate_size": 21504, "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128,
        "n_groups": 8, "conv_kernel": 4, "expand": 2, "chunk_size": 128, "vocab_size": 131072,
        "max_position_embeddings": 8192, "torch_dtype": "bfloat16"},
    "qwen3-next-80b-a3b": {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
        "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "linear_num_value_heads": 32,
        "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "decoder_sparse_step": 1, "vocab_size": 151936,
        "max_position_embeddings": 262144, "torch_dtype": "bfloat16", **_GDN},
    "qwen3.5-9b": {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
        "text_config": {"model_type": "qwen3_5_text", **_qwen3_5_text(32, 4096, 16, 4, 32, intermediate_size=12288)}},
    "qwen3.5-122b-a10b": {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "text_config": {"model_type": "qwen3_5_moe_text", **_qwen3_5_text(
            48, 3072, 32, 2, 64, num_experts=256, num_experts_per_tok=8, moe_intermediate_size=1024,
            shared_expert_intermediate_size=1024, decoder_sparse_step=1)}},
    "jamba-1.5-mini": {
        "architectures": ["JambaForCausalLM"], "model_type": "jamba", "hidden_size": 4096, "num_hidden_layers": 32,
        "attn_layer_period": 8, "attn_layer_offset": 4, "num_attention_heads": 32, "num_key_value_heads": 8,
        "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 256,
        "expert_layer_period": 2, "expert_layer_offset": 1, "num_experts": 16, "num_experts_per_tok": 2,
        "intermediate_size": 14336, "vocab_size": 65536, "max_position_embeddings": 262144,
        "torch_dtype": "bfloat16"},
}


# vLLM classes this env cannot import (torchvision), resolved as Qwen3-Next twins
TWINNED = ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")


def resolvable(name: str) -> tuple[dict[str, Any], str]:
    """The config.json vLLM resolves for ``name`` here, and the config hook (a MODELS_CONFIG_MAP architecture) to
    apply after, "" when the real config resolves as it is."""
    real = REAL_CONFIGS[name]
    arch = real["architectures"][0]
    if arch not in TWINNED:
        return real, ""
    text = {k: v for k, v in real["text_config"].items() if k != "model_type"}
    return {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", **text}, arch


def write_real_model(name: str, out: Path, tokenizer_from: Path) -> Path:
    """``out`` holding the config.json vLLM resolves for ``name`` here and the tiny Llama's tokenizer files."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(resolvable(name)[0]))
    for f in tokenizer_from.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, out / f.name)
    return out
