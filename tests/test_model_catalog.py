"""The model catalog: generated from catalog-src/models by scripts/build_model_catalog.py, every entry a real config."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from llmtriage import catalog
from llmtriage.capacity.model import ModelSpec, spec_from_config

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "catalog-src" / "models").glob("*.json"))


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_model_catalog", ROOT / "scripts" / "build_model_catalog.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("build_model_catalog", module)
    spec.loader.exec_module(module)
    return module


BUILDER = _builder()


def _spec(model_id: str) -> ModelSpec:
    entry = catalog.models()[model_id]
    return spec_from_config(entry.config, entry.id, entry.source)


def _raw(model_id: str) -> dict:
    return json.loads((ROOT / "catalog-src" / "models" / (model_id.replace("/", "__") + ".json")).read_text())


def test_models_yaml_is_generated_from_the_sources() -> None:
    assert BUILDER.main(["--check"]) == 0, "run .venv/bin/python scripts/build_model_catalog.py"


def test_the_sources_load_and_check_clean() -> None:
    sources = BUILDER.load_sources()
    assert len(sources) == len(SOURCES)
    assert sorted(s["id"] for s in sources) == sorted(catalog.models())


def test_at_least_150_models_of_many_architectures() -> None:
    models = catalog.models()
    assert len(models) >= 150
    architectures = {str(_spec(m).architecture).split(" ")[0] for m in models}
    assert len(architectures) >= 40


@pytest.mark.parametrize("model_id", sorted(catalog.models()))
def test_every_entry_parses_with_plausible_numbers(model_id: str) -> None:
    spec = _spec(model_id)
    assert 1 <= spec.num_layers <= 1000
    assert spec.hidden_size >= 64 and 16 <= spec.head_dim <= 1024
    assert 1 <= spec.num_kv_heads <= spec.num_attention_heads
    assert spec.num_attention_heads % spec.num_kv_heads == 0
    if spec.max_position_embeddings is not None:
        assert spec.max_position_embeddings >= 512
    if spec.vocab_size is not None:
        assert spec.vocab_size >= 1000
    if spec.is_moe:
        assert spec.experts_per_token is not None and spec.num_experts is not None
        assert spec.experts_per_token <= spec.num_experts
    if spec.is_mla:
        assert spec.kv_lora_rank is not None and spec.kv_lora_rank >= 64


@pytest.mark.parametrize("model_id", sorted(catalog.models()))
def test_every_entry_names_its_config_and_where_it_was_read(model_id: str) -> None:
    entry = catalog.models()[model_id]
    assert entry.source == f"https://huggingface.co/{model_id}/blob/main/config.json"
    raw = _raw(model_id)
    assert raw["id"] == model_id
    assert isinstance(raw["source"]["verified_copy"], str) and len(raw["source"]["verified_copy"]) > 10


def test_catalog_entry_reads_like_its_source_config() -> None:
    for path in SOURCES:
        raw = json.loads(path.read_text())
        if raw.get("same_as"):
            continue
        from_source = spec_from_config(raw["config"], raw["id"], "source")
        from_catalog = _spec(raw["id"])
        for field in ("num_layers", "num_kv_heads", "head_dim", "kv_lora_rank", "num_experts", "sliding_layers"):
            assert getattr(from_catalog, field) == getattr(from_source, field), (raw["id"], field)


def test_a_bad_source_is_refused(tmp_path: Path) -> None:
    good = _raw("Qwen/Qwen3-8B")
    (tmp_path / "Qwen__Qwen3-8B.json").write_text(json.dumps(good))
    assert len(BUILDER.load_sources(tmp_path)) == 1
    bad = dict(good, config={**good["config"], "num_key_value_heads": 7})
    (tmp_path / "Qwen__Qwen3-8B.json").write_text(json.dumps(bad))
    with pytest.raises(BUILDER.SourceError, match="not a multiple"):
        BUILDER.load_sources(tmp_path)
    unsourced = dict(good, source={"hf_config": good["source"]["hf_config"]})
    (tmp_path / "Qwen__Qwen3-8B.json").write_text(json.dumps(unsourced))
    with pytest.raises(BUILDER.SourceError, match="verified_copy"):
        BUILDER.load_sources(tmp_path)
    (tmp_path / "Qwen__Qwen3-8B.json").unlink()
    (tmp_path / "wrong_name.json").write_text(json.dumps(good))
    with pytest.raises(BUILDER.SourceError, match="file name"):
        BUILDER.load_sources(tmp_path)


# Numbers as read in the copies named in each source's verified_copy.
SPOT_CHECKS = {
    "meta-llama/Llama-3.1-8B": {"num_layers": 32, "num_kv_heads": 8, "hidden_size": 4096, "vocab_size": 128256},
    "meta-llama/Llama-3.1-405B": {"num_layers": 126, "hidden_size": 16384, "num_attention_heads": 128},
    "Qwen/Qwen3-235B-A22B": {"num_layers": 94, "num_experts": 128, "experts_per_token": 8, "num_kv_heads": 4},
    "Qwen/Qwen3-32B": {"num_layers": 64, "num_attention_heads": 64, "head_dim": 128, "hidden_size": 5120},
    "deepseek-ai/DeepSeek-V3": {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_experts": 256, "num_layers": 61},
    "deepseek-ai/DeepSeek-R1": {"kv_lora_rank": 512, "num_experts": 256, "first_dense_layers": 3},
    "moonshotai/Kimi-K2-Instruct": {"num_experts": 384, "num_attention_heads": 64, "kv_lora_rank": 512},
    "openai/gpt-oss-120b": {"num_layers": 36, "num_experts": 128, "sliding_layers": 18, "sliding_window": 128},
    "mistralai/Mistral-Nemo-Base-2407": {"num_layers": 40, "head_dim": 128, "hidden_size": 5120},
    "google/gemma-2-9b-it": {"num_layers": 42, "head_dim": 256, "sliding_layers": 21},
    "google/gemma-3-1b-it": {"num_layers": 26, "num_kv_heads": 1, "sliding_window": 512},
    "Qwen/Qwen3-Coder-480B-A35B-Instruct": {"num_layers": 62, "num_kv_heads": 8, "num_experts": 160},
    "zai-org/GLM-4.7-Flash": {"num_layers": 47, "kv_lora_rank": 512, "num_experts": 64},
    "bigcode/starcoder2-7b": {"num_layers": 32, "num_kv_heads": 4, "sliding_window": 4096},
    "mistralai/Mistral-7B-Instruct-v0.1": {
        "num_layers": 32,
        "num_kv_heads": 8,
        "sliding_window": 4096,
        "sliding_layers": 32,
    },
    "mistralai/Mistral-7B-Instruct-v0.2": {"num_kv_heads": 8, "sliding_layers": 0, "vocab_size": 32000},
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": {"num_layers": 28, "hidden_size": 1536, "num_kv_heads": 2},
    "Qwen/Qwen2.5-VL-7B-Instruct": {"num_layers": 28, "hidden_size": 3584, "num_kv_heads": 4},
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": {
        "num_layers": 48,
        "num_experts": 128,
        "experts_per_token": 8,
        "num_kv_heads": 4,
    },
    "meta-llama/Llama-3.2-90B-Vision-Instruct": {"num_layers": 100, "hidden_size": 8192, "num_kv_heads": 8},
    "LGAI-EXAONE/EXAONE-4.0-32B": {"num_layers": 64, "sliding_layers": 48, "sliding_window": 4096},
    "tiiuae/falcon-40b-instruct": {"num_layers": 60, "num_attention_heads": 128, "num_kv_heads": 8},
    "microsoft/Phi-3-small-8k-instruct": {"num_layers": 32, "num_kv_heads": 8, "vocab_size": 100352},
    "mistralai/Devstral-2-123B-Instruct-2512": {"num_layers": 88, "hidden_size": 12288, "num_attention_heads": 96},
    "nvidia/Kimi-K2.6-NVFP4": {"num_layers": 61, "num_experts": 384, "kv_lora_rank": 512},
    "mistralai/Mistral-Small-3.1-24B-Instruct-2503": {"num_layers": 40, "hidden_size": 5120, "head_dim": 128},
    "meta-llama/Llama-3.2-11B-Vision": {"num_layers": 40, "hidden_size": 4096, "num_kv_heads": 8},
    "Qwen/Qwen2-57B-A14B": {"num_layers": 28, "num_experts": 64, "experts_per_token": 8, "num_kv_heads": 4},
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": {"num_layers": 32, "num_kv_heads": 8, "vocab_size": 128256},
}


@pytest.mark.parametrize("model_id", sorted(SPOT_CHECKS))
def test_spot_checks_against_the_copies(model_id: str) -> None:
    spec = _spec(model_id)
    for field, value in SPOT_CHECKS[model_id].items():
        assert getattr(spec, field) == value, field


def test_checkpoints_that_ship_quantized_keep_their_quantization_config() -> None:
    for model_id, method in (
        ("openai/gpt-oss-20b", "mxfp4"),
        ("openai/gpt-oss-120b", "mxfp4"),
        ("deepseek-ai/DeepSeek-V3", "fp8"),
        ("Qwen/Qwen3-32B-FP8", "fp8"),
        ("Qwen/Qwen3-235B-A22B-FP8", "fp8"),
        ("mistralai/Devstral-2-123B-Instruct-2512", "fp8"),
        ("nvidia/Kimi-K2.6-NVFP4", "modelopt"),
    ):
        entry = catalog.models()[model_id]
        assert entry.config["quantization_config"]["quant_method"] == method, model_id
    assert "quantization_config" not in catalog.models()["Qwen/Qwen3-32B"].config


def test_multimodal_entries_read_their_text_model() -> None:
    spec = _spec("Qwen/Qwen3-VL-8B-Instruct")
    raw = _raw("Qwen/Qwen3-VL-8B-Instruct")["config"]
    assert spec.num_layers == raw["text_config"]["num_hidden_layers"]
    assert spec.architecture == raw["architectures"][0]
