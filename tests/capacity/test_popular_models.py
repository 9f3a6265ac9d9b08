"""Popular model ids as users type them (base, quantized, re-published, distilled) on GPUs as users name them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmtriage.capacity import FitRequest, LaunchSettings, fit, parse_version, resolve_gpu, resolve_model
from llmtriage.capacity.resolve import from_catalog
from llmtriage.capacity.weights import weights_bytes
from llmtriage.errors import UsageError

GIB = 2**30

# (what the user types, the catalog architecture it must be priced as, quantization method, bits)
MODELS = [
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", None, None),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", None, None),
    ("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.3-70B-Instruct", None, None),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "meta-llama/Llama-3.1-8B-Instruct", "fp8", 8),
    (
        "neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w4a16",
        "meta-llama/Llama-3.1-70B-Instruct",
        "compressed-tensors",
        4,
    ),
    ("RedHatAI/Llama-3.3-70B-Instruct-quantized.w8a8", "meta-llama/Llama-3.3-70B-Instruct", "compressed-tensors", 8),
    ("unsloth/Llama-3.3-70B-Instruct-bnb-4bit", "meta-llama/Llama-3.3-70B-Instruct", "bitsandbytes", 4),
    ("unsloth/Meta-Llama-3.1-8B-Instruct-unsloth-bnb-4bit", "meta-llama/Llama-3.1-8B-Instruct", "bitsandbytes", 4),
    ("nvidia/Llama-3.3-70B-Instruct-FP8", "meta-llama/Llama-3.3-70B-Instruct", "fp8", 8),
    ("nvidia/Llama-3.3-70B-Instruct-FP4", "meta-llama/Llama-3.3-70B-Instruct", "nvfp4", 4),
    ("TheBloke/Llama-2-7B-Chat-AWQ", "meta-llama/Llama-2-7b-hf", "awq", 4),
    ("TheBloke/Llama-2-13B-chat-GPTQ", "meta-llama/Llama-2-13b-hf", "gptq", 4),
    ("casperhansen/llama-3-70b-instruct-awq", "meta-llama/Meta-Llama-3-70B", "awq", 4),
    ("NousResearch/Hermes-3-Llama-3.1-8B", "meta-llama/Llama-3.1-8B", None, None),
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "Qwen/Qwen2.5-7B-Instruct", "awq", 4),
    ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", "Qwen/Qwen2.5-72B-Instruct", "gptq", 4),
    ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int8", "Qwen/Qwen2.5-72B-Instruct", "gptq", 8),
    ("Qwen/Qwen3-32B-AWQ", "Qwen/Qwen3-32B", "awq", 4),
    ("Qwen/Qwen3-8B-FP8", "Qwen/Qwen3-8B", "fp8", 8),
    ("Qwen/Qwen3-30B-A3B-GPTQ-Int4", "Qwen/Qwen3-30B-A3B", "gptq", 4),
    ("Qwen/Qwen3-235B-A22B-FP8", "Qwen/Qwen3-235B-A22B-FP8", "fp8", 8),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "Qwen/Qwen3-235B-A22B-Instruct-2507", "fp8", 8),
    ("unsloth/Qwen3-14B-unsloth-bnb-4bit", "Qwen/Qwen3-14B", "bitsandbytes", 4),
    ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3", "fp8", 8),
    ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1", "fp8", 8),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B", None, None),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", None, None),
    (
        "unsloth/DeepSeek-R1-Distill-Llama-8B-unsloth-bnb-4bit",
        "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
        "bitsandbytes",
        4,
    ),
    ("casperhansen/deepseek-r1-distill-qwen-1.5b-awq", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "awq", 4),
    ("openai/gpt-oss-120b", "openai/gpt-oss-120b", "mxfp4", 4),
    ("openai/gpt-oss-20b", "openai/gpt-oss-20b", "mxfp4", 4),
    ("google/gemma-3-27b-it", "google/gemma-3-27b-it", None, None),
    ("RedHatAI/gemma-3-27b-it-FP8-dynamic", "google/gemma-3-27b-it", "fp8", 8),
    ("google/gemma-2-9b-it", "google/gemma-2-9b-it", None, None),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mistralai/Mixtral-8x7B-Instruct-v0.1", None, None),
    ("TheBloke/Mixtral-8x7B-Instruct-v0.1-GPTQ", "mistralai/Mixtral-8x7B-Instruct-v0.1", "gptq", 4),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistralai/Mistral-7B-Instruct-v0.3", None, None),
    ("microsoft/Phi-3-mini-4k-instruct", "microsoft/Phi-3-mini-4k-instruct", None, None),
    ("microsoft/phi-4", "microsoft/phi-4", None, None),
    ("moonshotai/Kimi-K2-Instruct", "moonshotai/Kimi-K2-Instruct", "fp8", 8),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "meta-llama/Llama-4-Scout-17B-16E-Instruct", None, None),
]

# What users type for GPUs, and the catalog part with the memory torch reports (GiB) or the estimate's base (GB).
GPUS = [
    ("H100 80GB", "H100 SXM"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("A100 80GB", "A100 SXM 80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
    ("4090", "RTX 4090"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("L40S", "L40S"),
    ("A10G", "A10G"),
    ("T4", "T4"),
    ("V100-32GB", "V100 SXM2 32GB"),
    ("L4", "L4"),
    ("H200", "H200 SXM"),
    ("MI300X", "MI300X"),
]


def _shape(model_id: str) -> tuple[int | None, ...]:
    spec = from_catalog(model_id)
    assert spec is not None, f"{model_id} left the catalog"
    return spec.shape


@pytest.mark.parametrize(("typed", "base", "method", "bits"), MODELS, ids=[m[0] for m in MODELS])
def test_a_popular_model_id_resolves_to_its_architecture_and_quantization(
    typed: str, base: str, method: str | None, bits: int | None
) -> None:
    spec = resolve_model(typed)
    assert spec.shape == _shape(base)
    assert (spec.quant.method if spec.quant else None, spec.quant.bits if spec.quant else None) == (method, bits)
    if typed != base:
        assert base in spec.note, spec.note  # the output says which base it assumed


def test_the_table_covers_enough_models_and_gpus() -> None:
    assert len(MODELS) >= 30 and len(GPUS) >= 10
    assert len({m[1] for m in MODELS}) >= 25  # distinct architectures, not one model in many spellings


@pytest.mark.parametrize(("typed", "name"), GPUS, ids=[g[0] for g in GPUS])
def test_every_model_fits_or_not_on_every_gpu_spelling(typed: str, name: str) -> None:
    gpu = resolve_gpu(typed)
    assert gpu.name == name
    for model_id, _, _, _ in MODELS:
        model = resolve_model(model_id)
        result = fit(FitRequest(model, gpu, LaunchSettings(max_model_len=4096), parse_version("0.11.0")))
        assert (result.model, result.gpu, result.gpu_total_gib) == (model_id, name, gpu.total_memory_gib)
        weights = weights_bytes(model, None, "auto") / GIB
        assert result.weights_gib == pytest.approx(weights)
        # a model whose weights alone exceed the GPU never "starts"
        if weights > gpu.total_memory_gib:
            assert not result.starts


def test_gpt_oss_120b_on_one_h100_weighs_what_vllm_loads() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmtriage",
            "fit",
            "--model",
            "openai/gpt-oss-120b",
            "--gpu",
            "H100 80GB",
            "--max-model-len",
            "8192",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    data = json.loads(done.stdout)
    # vLLM 0.11.2: "Model loading took 65.9651 GiB" (blog.huikang.dev/2025/12/28/vllm-logs.html)
    assert abs(data["weights_gib"] - 65.97) / 65.97 < 0.05, data["weights_gib"]
    assert data["quantization"].startswith("mxfp4") and data["gpu"] == "H100 SXM"
    assert done.returncode == 0 and data["starts"]


@pytest.mark.parametrize(
    ("typed", "must_list", "must_not_list"),
    [
        # no size in the name: the family's models, each named as a different model
        ("foo/Mixtral-Instruct-AWQ", ["Mixtral-8x7B", "Mixtral-8x22B"], []),
        # a size the family does not have: nothing passed off as the same model
        ("Qwen/Qwen3-33B", [], ["Qwen3-32B", "Qwen3-8B"]),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-3B", [], ["DeepSeek-R1\n", "DeepSeek-V3", "DeepSeek-R1,"]),
        ("Llama-3.1-8B-Instrukt", ["meta-llama/Llama-3.1-8B"], ["70B", "405B"]),
    ],
)
def test_unknown_names_list_only_the_same_family_and_size(
    typed: str, must_list: list[str], must_not_list: list[str]
) -> None:
    with pytest.raises(UsageError) as e:
        resolve_model(typed)
    for text in must_list:
        assert text in e.value.hint
    for text in must_not_list:
        assert text not in e.value.hint + "\n"


def test_gguf_repositories_are_refused_with_the_reason() -> None:
    with pytest.raises(UsageError, match="GGUF repository holds one file per quantization level"):
        resolve_model("unsloth/Qwen3-32B-GGUF")
