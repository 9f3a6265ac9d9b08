"""A Hugging Face ``config.json`` -> the architecture facts memory and speed depend on."""

from __future__ import annotations

import json

from llmtriage.facts import ModelConfig, Problem
from llmtriage.parse.hf_config import first_int, language_model_fields


def parse_model_config(text: str, source: str) -> tuple[ModelConfig | None, list[Problem]]:
    """Read a config.json; multimodal configs are read through their ``text_config``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return None, [Problem(source, f"not JSON: {e.msg} at line {e.lineno}")]
    except (RecursionError, ValueError):  # nested too deep; an integer of too many digits
        return None, [Problem(source, "not a JSON config: nested too deep or a number too long to read")]
    if not isinstance(data, dict):
        return None, [Problem(source, "config.json is not a JSON object")]
    core = language_model_fields(data)
    architectures = data.get("architectures") or core.get("architectures") or []
    heads = first_int(core, "num_attention_heads", "n_head")
    hidden = first_int(core, "hidden_size", "n_embd", "d_model")
    head_dim = first_int(core, "head_dim")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    quant = core.get("quantization_config")
    config = ModelConfig(
        architecture=str(architectures[0]) if architectures else None,
        num_hidden_layers=first_int(core, "num_hidden_layers", "n_layer", "num_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=first_int(core, "num_key_value_heads", "num_kv_heads") or heads,
        head_dim=head_dim,
        vocab_size=first_int(core, "vocab_size"),
        max_position_embeddings=first_int(core, "max_position_embeddings", "n_positions", "max_seq_len", "seq_length"),
        torch_dtype=str(core.get("torch_dtype") or core.get("dtype") or "") or None,
        sliding_window=first_int(core, "sliding_window"),
        kv_lora_rank=first_int(core, "kv_lora_rank"),
        qk_rope_head_dim=first_int(core, "qk_rope_head_dim"),
        quantization=str(quant.get("quant_method")) if isinstance(quant, dict) and quant.get("quant_method") else None,
        source=source,
    )
    problems = []
    if config.num_hidden_layers is None or hidden is None:
        problems.append(Problem(source, "config.json lacks num_hidden_layers or hidden_size"))
    return config, problems
