"""The capacity rules inside the diagnosis, on bundles built from recorded outputs."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import yaml

from llmtriage import catalog
from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import read_evidence

FIXTURES = Path(__file__).parent.parent / "fixtures"
# An H100 80GB HBM3 table (vllm-project/vllm#55169).
H100_TABLE = "nvidia-smi/nvidia-smi-table-3.txt"


def _bundle(root: Path, log: str, launch: str, nvidia_smi: str, extra_gpu: str | None = None) -> Path:
    for rel, text in (
        ("logs/server.log", log),
        ("config/launch.txt", launch),
        ("gpu/nvidia-smi.txt", (FIXTURES / nvidia_smi).read_text()),
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    if extra_gpu:
        (root / "gpu/performance.txt").write_text((FIXTURES / extra_gpu).read_text())
    return root


def test_startup_oom_names_the_largest_max_model_len_that_fits(tmp_path: Path) -> None:
    # The log of vllm-project/vllm#15871 (V1 0.8.3, DeepSeek-V2-Lite, MLA); launch flags as that case used them.
    case = yaml.safe_load((FIXTURES / "fit-cases/vllm-15871-deepseek-v2-lite-chat-mla-32k.yaml").read_text())
    root = _bundle(
        tmp_path,
        case["log"],
        "vllm serve deepseek-ai/DeepSeek-V2-Lite-Chat --max-model-len 32768 --tensor-parallel-size 2",
        H100_TABLE,
    )
    result = diagnose(read_evidence(root))
    assert result.symptom_class == "startup_oom"
    top = result.causes[0]
    assert top.id == "kv_cache_too_small_for_max_model_len"
    notes = [e.note for e in top.evidence]
    assert any("largest max-model-len that fits is 32,0" in n for n in notes), notes


def _slow_bundle(
    root: Path, tpot_ms: float, performance: str | None, model: str = "meta-llama/Llama-3.1-8B-Instruct"
) -> Path:
    # vllm bench serve's block: mean, median and p99 (the median is what answers a p95 objective here).
    log = (
        "============ Serving Benchmark Result ============\n"
        f"Mean TPOT (ms):                          {tpot_ms}\n"
        f"Median TPOT (ms):                        {tpot_ms}\n"
        f"P99 TPOT (ms):                           {tpot_ms * 1.3:.2f}\n"
    )
    return _bundle(root, log, f"vllm serve {model}", H100_TABLE, performance)


def _tight_slo() -> catalog.Thresholds:
    t = catalog.thresholds()
    return dataclasses.replace(t, slo=dataclasses.replace(t.slo, itl_p95_s=0.004))


def test_tpot_near_the_roofline_is_memory_bandwidth_bound(tmp_path: Path) -> None:
    # Llama-3.1-8B reads ~16 GB per step; an H100 moves 3.35 TB/s: the floor is ~4.8 ms.
    result = diagnose(read_evidence(_slow_bundle(tmp_path, 5.5, None)), _tight_slo())
    assert result.symptom_class == "slow_generation"
    top = result.causes[0]
    assert top.id == "memory_bandwidth_bound"
    assert any("don't tune compute knobs" in e.note for e in top.evidence)


def test_tpot_far_below_the_roofline_is_not_called_bandwidth_bound(tmp_path: Path) -> None:
    result = diagnose(read_evidence(_slow_bundle(tmp_path, 40.0, None)), _tight_slo())
    notes = [e.note for c in result.causes for e in c.evidence]
    assert not any("roofline floor" in n and "ceiling" in n for n in notes)


def test_a_quantized_re_upload_is_priced_as_its_base_in_the_roofline(tmp_path: Path) -> None:
    # RedHatAI's FP8 Llama-3.1-8B is not in the catalog: priced as Llama-3.1-8B with 1-byte weights, the floor
    # halves (~8.5 GB per step at 3.35 TB/s = ~2.7 ms, not the 16-bit ~4.8 ms).
    bundle = _slow_bundle(tmp_path, 4.2, None, "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic")
    result = diagnose(read_evidence(bundle), _tight_slo())
    notes = [e.note for c in result.causes for e in c.evidence if "roofline floor of" in e.note]
    assert notes, [c.id for c in result.causes]
    floor_ms = float(re.search(r"roofline floor of ([0-9.]+) ms", notes[0]).group(1))  # type: ignore[union-attr]
    assert 2.4 <= floor_ms <= 3.0, notes[0]
