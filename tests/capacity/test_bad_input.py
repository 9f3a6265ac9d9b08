"""Unknown names, configs missing fields and nonsense values: clear usage errors with a hint."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from llmtriage.capacity import FitRequest, LaunchSettings, fit, parse_version, resolve_gpu, resolve_model
from llmtriage.capacity.model import safetensors_bytes
from llmtriage.errors import UsageError


def _fit(**launch: object) -> None:
    request = FitRequest(
        resolve_model("Qwen/Qwen3-8B"),
        resolve_gpu("L4"),
        LaunchSettings(**launch),
        parse_version("0.10.1"),  # type: ignore[arg-type]
    )
    fit(request)


@pytest.mark.parametrize(
    ("launch", "flag"),
    [
        ({"gpu_memory_utilization": 1.2}, "--gpu-memory-utilization"),
        ({"gpu_memory_utilization": 0.0}, "--gpu-memory-utilization"),
        ({"max_model_len": -1}, "--max-model-len"),
        ({"tensor_parallel_size": 0}, "--tp"),
        ({"kv_cache_dtype": "int3"}, "--kv-cache-dtype"),
        ({"quantization": "magic"}, "--quantization"),
        ({"dtype": "float7"}, "--dtype"),
    ],
)
def test_nonsense_values(launch: dict[str, object], flag: str) -> None:
    with pytest.raises(UsageError, match=flag):
        _fit(**launch)


def test_free_memory_beyond_the_gpu() -> None:
    request = FitRequest(resolve_model("Qwen/Qwen3-8B"), resolve_gpu("L4"), LaunchSettings(), parse_version("0.10.1"))
    with pytest.raises(UsageError, match="--free-memory-gib"):
        fit(replace(request, free_memory_gib=30.0))


def test_unknown_gpu_suggests_close_names() -> None:
    with pytest.raises(UsageError) as e:
        resolve_gpu("RTX 4090 Ti")
    assert "RTX 4090" in e.value.hint


def test_unknown_model_suggests_close_names() -> None:
    with pytest.raises(UsageError) as e:
        resolve_model("Qwen/Qwen3-8")
    assert "Qwen/Qwen3-8B" in e.value.hint


def test_bad_engine_version() -> None:
    with pytest.raises(UsageError, match="engine-version"):
        parse_version("latest")


def test_config_missing_fields(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}))
    with pytest.raises(UsageError, match="num_hidden_layers"):
        resolve_model(str(config))
    config.write_text("{not json")
    with pytest.raises(UsageError, match="not JSON"):
        resolve_model(str(config))


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def test_weights_from_safetensors_headers(tmp_path: Path) -> None:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 100,
        "max_position_embeddings": 512,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    _write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a": ("BF16", [64, 64], 8192)})
    _write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"b": ("I32", [16, 64], 4096)})
    assert safetensors_bytes(tmp_path) == 8192 + 4096
    assert resolve_model(str(tmp_path)).weights_bytes == 8192 + 4096
    (tmp_path / "broken.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(UsageError, match="not a safetensors file"):
        safetensors_bytes(tmp_path)
