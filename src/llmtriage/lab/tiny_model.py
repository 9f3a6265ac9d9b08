"""Generate the tiny Llama a CPU vLLM serves in the lab and the tests: no hub access, seconds to build.

Run with the vLLM venv's Python (it needs torch, transformers and tokenizers):
``python tiny_model.py OUT_DIR``. A byte-level BPE tokenizer of 4,096 tokens is trained on the Python
standard library's own sources (always present, deterministic for a Python version), with a chat template;
the model is a 2-layer Llama (hidden 256, 4 heads, 2 KV heads, head_dim 64, 2,048 positions, bf16,
~3.3 M parameters) with seeded random weights saved as safetensors.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
CORPUS_FILES = 200


def corpus() -> list[str]:
    """The first CORPUS_FILES .py files of the standard library, sorted: local, stable text."""
    stdlib = Path(os.__file__).parent
    return [str(p) for p in sorted(stdlib.glob("*.py"))[:CORPUS_FILES]]


def main(out: Path) -> None:
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train(
        files=corpus(), vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIAL_TOKENS, show_progress=False
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|pad|>",
        model_max_length=2048,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
