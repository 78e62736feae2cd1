"""A tiny Llama with random weights and a locally built tokenizer: something `vllm serve` can load offline.

Run with the vLLM venv's python (it has torch, transformers and tokenizers):
    python tests/vllm_cpu/build_model.py OUT_DIR
Nothing is downloaded. The weights are random (seeded): the tests check serving and caching, not text.
"""

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 1024


def main(out: Path) -> None:
    torch.manual_seed(0)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
                         bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    fast.save_pretrained(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
