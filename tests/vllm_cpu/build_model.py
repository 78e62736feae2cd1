"""Tiny models with random weights and a locally built tokenizer: something `vllm serve` can load offline.

Run with the vLLM venv's python (it has torch, transformers and tokenizers):
    python tests/vllm_cpu/build_model.py OUT_DIR                 # dense Llama (2 layers)
    python tests/vllm_cpu/build_model.py --nemotronh OUT_DIR     # hybrid NemotronH: Mamba2, MLP, attention, MLP
    python tests/vllm_cpu/build_model.py --qwen3next OUT_DIR     # hybrid Qwen3-Next: gated delta net, attention
Nothing is downloaded. The weights are random (seeded): the tests check serving and caching, not text.
The hybrid follows docs/engines/vllm.md (pattern M-*-, hidden 128, 4 mamba heads x 64).
"""

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    NemotronHConfig,
    NemotronHForCausalLM,
    PreTrainedTokenizerFast,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

VOCAB = 1024


def main(out: Path, kind: str) -> None:
    torch.manual_seed(0)
    # Word-level: every id decodes to a non-empty word ("w123"), so each streamed token carries text.
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    model: torch.nn.Module
    if kind == "--qwen3next":
        # Qwen3-Next's layout in miniature: gated-delta-net (linear attention) layers then full attention, a
        # sparse MoE MLP with a shared expert in every layer.
        qwen = Qwen3NextConfig(
            vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            num_attention_heads=2, num_key_value_heads=2, head_dim=64, linear_conv_kernel_dim=4,
            linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=1, linear_num_value_heads=2,
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=64,
            decoder_sparse_step=1, max_position_embeddings=4096,
            pad_token_id=0, bos_token_id=1, eos_token_id=2, dtype="bfloat16",
        )
        model = Qwen3NextForCausalLM(qwen).to(torch.bfloat16)
    elif kind == "--nemotronh":
        config = NemotronHConfig(
            vocab_size=VOCAB, hidden_size=128, layers_block_type=["linear_attention", "mlp", "full_attention", "mlp"],
            num_attention_heads=2, num_key_value_heads=2, head_dim=64, intermediate_size=256,
            mamba_num_heads=4, mamba_head_dim=64, n_groups=1, ssm_state_size=16, chunk_size=64, expand=2,
            conv_kernel=4, max_position_embeddings=4096,
            pad_token_id=0, bos_token_id=1, eos_token_id=2, dtype="bfloat16",
        )
        model = NemotronHForCausalLM(config).to(torch.bfloat16)
    else:
        llama = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
                            bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
        model = LlamaForCausalLM(llama).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)  # type: ignore[operator]
    fast.save_pretrained(out)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(Path(args[-1]), args[0] if len(args) > 1 else "--llama")
