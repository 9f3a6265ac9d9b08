"""Models from where users keep them: a fake Hugging Face cache with no network, and checkpoints' quantization_config."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from llmtriage import catalog
from llmtriage.capacity import resolve_model
from llmtriage.capacity.quantization import from_config
from llmtriage.capacity.resolve import find_model
from llmtriage.capacity.weights import weights_bytes
from llmtriage.errors import UsageError

GIB = 2**30
# An AWQ checkpoint of Qwen2.5-7B-Instruct: the architecture is the catalog's real config.json of the base
# (catalog-src/models/Qwen__Qwen2.5-7B-Instruct.json), with AutoAWQ's 4-bit, groups-of-128 quantization_config.
QWEN_AWQ_CONFIG = {
    **catalog.models()["Qwen/Qwen2.5-7B-Instruct"].config,
    "quantization_config": {"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm", "zero_point": True},
}
# A total_size for the fake cache's index: not the real checkpoint's, only a number the test can recognise.
INDEX_TOTAL_SIZE = 5_555_555_555
# What vLLM 0.7.3 printed loading Qwen2.5-7B-Instruct with --quantization awq on an RTX 4060
# ("Loading model weights took 5.2032 GB", vllm-project/vllm#13882; tests/fixtures/fit-cases).
VLLM_AWQ_WEIGHTS_GIB = 5.2032


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("a network connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _cache(root: Path, repo_id: str, files: dict[str, object], *, ref: bool = True) -> Path:
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / "a1b2c3d4e5f6"
    snapshot.mkdir(parents=True)
    for name, content in files.items():
        (snapshot / name).write_text(json.dumps(content), encoding="utf-8")
    if ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("a1b2c3d4e5f6", encoding="utf-8")
    return snapshot


def test_a_model_in_the_hf_cache_resolves_without_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    index = {"metadata": {"total_size": INDEX_TOTAL_SIZE}, "weight_map": {}}
    snapshot = _cache(
        tmp_path / "hub",
        "Qwen/Qwen2.5-7B-Instruct-AWQ",
        {"config.json": QWEN_AWQ_CONFIG, "model.safetensors.index.json": index},
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    spec = resolve_model("Qwen/Qwen2.5-7B-Instruct-AWQ", online=False)
    assert spec.weights_bytes == INDEX_TOTAL_SIZE
    assert spec.quant is not None and (spec.quant.method, spec.quant.bits, spec.quant.group_size) == ("awq", 4, 128)
    assert str(snapshot) in spec.note
    assert weights_bytes(spec, None, "auto") == INDEX_TOTAL_SIZE
    # --quantization naming the checkpoint's own method (vLLM's marlin kernel of it) keeps the exact bytes
    assert weights_bytes(spec, "awq_marlin", "auto") == INDEX_TOTAL_SIZE


def test_hf_home_and_a_snapshot_without_refs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None) -> None:
    _cache(tmp_path / "home" / "hub", "acme/tiny-llama", {"config.json": QWEN_AWQ_CONFIG}, ref=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    spec = resolve_model("acme/tiny-llama")
    assert spec.num_layers == 28 and spec.weights_bytes is None


def test_a_cache_entry_without_config_falls_through_to_the_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    _cache(tmp_path / "hub", "Qwen/Qwen3-8B", {"tokenizer.json": {}})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    spec = resolve_model("Qwen/Qwen3-8B")
    assert spec.note == "" and spec.num_layers == 36


@pytest.mark.parametrize(
    ("quantization_config", "method", "bits", "bytes_per_weight"),
    [
        # Qwen/Qwen3-8B-FP8 and deepseek-ai/DeepSeek-V3: block-wise fp8, one fp32 scale per 128x128 block
        (
            {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]},
            "fp8",
            8,
            1 + 4 / 16384,
        ),
        # Qwen/Qwen2.5-72B-Instruct-GPTQ-Int8
        (
            {"bits": 8, "damp_percent": 0.01, "desc_act": False, "group_size": 128, "quant_method": "gptq"},
            "gptq",
            8,
            1 + 2.5 / 128,
        ),
        # TheBloke GPTQ, per-channel (group_size -1)
        ({"bits": 4, "group_size": -1, "quant_method": "gptq"}, "gptq", 4, 0.5),
        # AutoAWQ's older field names
        ({"quant_method": "awq", "w_bit": 4, "q_group_size": 64, "zero_point": True}, "awq", 4, 0.5 + 2.5 / 64),
        # RedHatAI ...-quantized.w4a16 (compressed-tensors, pack-quantized)
        (
            {
                "quant_method": "compressed-tensors",
                "format": "pack-quantized",
                "config_groups": {
                    "group_0": {
                        "targets": ["Linear"],
                        "weights": {
                            "num_bits": 4,
                            "type": "int",
                            "strategy": "group",
                            "group_size": 128,
                            "symmetric": True,
                        },
                    }
                },
            },
            "compressed-tensors",
            4,
            0.5 + 2 / 128,
        ),
        # RedHatAI ...-FP8-dynamic (compressed-tensors, channel-wise fp8)
        (
            {
                "quant_method": "compressed-tensors",
                "format": "float-quantized",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}},
            },
            "compressed-tensors",
            8,
            1.0,
        ),
        # NVFP4 through compressed-tensors
        (
            {
                "quant_method": "compressed-tensors",
                "format": "nvfp4-pack-quantized",
                "config_groups": {
                    "group_0": {
                        "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}
                    }
                },
            },
            "compressed-tensors",
            4,
            0.5 + 1 / 16,
        ),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "bitsandbytes", 4, None),
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "bitsandbytes", 8, 1.0),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}, "modelopt_fp4", 4, 0.5 + 1 / 16),
        ({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}, "mxfp4", 4, 0.5 + 1 / 32),
    ],
)
def test_quantization_config_sets_the_bytes_per_weight(
    quantization_config: dict[str, object], method: str, bits: float, bytes_per_weight: float | None
) -> None:
    scheme = from_config(quantization_config)
    assert scheme is not None
    assert (scheme.method, scheme.bits) == (method, bits)
    if bytes_per_weight is not None:
        assert scheme.bytes_per_weight == pytest.approx(bytes_per_weight)
    assert 0.5 <= scheme.bytes_per_weight <= 1.1


def test_a_checkpoints_config_quantization_prices_the_weights(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN_AWQ_CONFIG), encoding="utf-8")
    spec = resolve_model(str(tmp_path / "config.json"))
    awq = weights_bytes(spec, None, "auto")
    # embeddings and lm_head stay 16-bit: 2 x 152064 x 3584 x 2 bytes = 2.03 GiB of the total
    assert 5.0 * GIB < awq < 5.4 * GIB, awq / GIB
    assert abs(awq / GIB - VLLM_AWQ_WEIGHTS_GIB) / VLLM_AWQ_WEIGHTS_GIB < 0.02, awq / GIB
    # --quantization fp8 re-quantizes a 16-bit load: the checkpoint's AWQ no longer applies
    assert weights_bytes(spec, "fp8", "auto") > awq


def test_unknown_quantization_in_a_checkpoint_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({**QWEN_AWQ_CONFIG, "quantization_config": {"quant_method": "quipsharp"}}), encoding="utf-8"
    )
    with pytest.raises(UsageError, match="quipsharp") as e:
        resolve_model(str(tmp_path / "config.json"))
    assert "--quantization" in e.value.hint


@pytest.mark.parametrize(
    ("launch_model", "base"),
    [
        # a path into the server's Hugging Face cache, as vLLM logs print it
        (
            "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/a09a3545",
            "Qwen/Qwen2.5-7B-Instruct",
        ),
        # a directory on the server's machine, named after the checkpoint
        ("/models/Qwen2.5-7B-Instruct-AWQ", "Qwen/Qwen2.5-7B-Instruct"),
        ("~/models/Meta-Llama-3-70B-Instruct", "meta-llama/Meta-Llama-3-70B"),
    ],
)
def test_a_launch_path_from_another_machine_resolves_offline(launch_model: str, base: str) -> None:
    spec = find_model(launch_model)
    assert spec is not None
    assert base in spec.name or base in spec.note


def test_a_launch_model_nothing_resolves_is_none_for_the_diagnosis() -> None:
    assert find_model("/data/model/llama") is None
    assert find_model("unsloth/Qwen3-32B-GGUF") is None
