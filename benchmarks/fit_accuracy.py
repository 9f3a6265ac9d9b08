"""Start/fail accuracy of `llmtriage fit` against vllm-wizard's accounting, on recorded vLLM startups.

The baseline, measured in the same run on the same cases, is vllm-wizard's planner (vashkelis/vllm-wizard,
planning/memory.py and planner.py): weights = params x bytes (AWQ/GPTQ 0.55 byte), split over TP; KV for one
max-model-len sequence as 2 x KV heads x head_dim x layers x bytes with a fixed x1.15 fragmentation factor,
no MLA (every head's K and V) and no activation term; overhead max(1 GiB, 2% of memory) + 0.25 GiB per extra
TP rank; it fits when that leaves 1 GiB of headroom under memory x TP x utilization.

Usage: python benchmarks/fit_accuracy.py [--all]   (default: the held-aside cases only)
"""

from __future__ import annotations

import sys
from pathlib import Path

from llmtriage.capacity import fit
from llmtriage.capacity.cases import RecordedStart, held_aside, load_case
from llmtriage.capacity.fit import GIB
from llmtriage.capacity.weights import param_counts

CASES_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "fit-cases"
WIZARD_QUANT_BYTES = {"awq": 0.55, "gptq": 0.55, "int8": 1.0, "fp8": 1.0}
WIZARD_FRAGMENTATION = 1.15


def wizard_starts(case: RecordedStart) -> bool:
    """vllm-wizard's verdict for the case."""
    request = case.request
    model, launch, gpu = request.model, request.launch, request.gpu
    tp = launch.tensor_parallel_size
    quant = (launch.quantization or (model.quant.method if model.quant else "")).lower()
    weights = param_counts(model).total * WIZARD_QUANT_BYTES.get(quant, 2.0) / tp
    context = launch.max_model_len or model.max_position_embeddings or 0
    kv_bytes = 1.0 if "fp8" in launch.kv_cache_dtype else 2.0
    head_dim = model.hidden_size // model.num_attention_heads
    kv = 2 * model.num_kv_heads * head_dim * model.num_layers * context * kv_bytes * WIZARD_FRAGMENTATION
    vram = gpu.total_memory_gib * GIB * tp
    overhead = (max(1.0, 0.02 * vram / GIB) + 0.25 * (tp - 1)) * GIB
    return vram * launch.gpu_memory_utilization - (weights + kv + overhead) >= 1.0 * GIB


def main() -> int:
    paths = sorted(CASES_DIR.glob("*.yaml")) if "--all" in sys.argv else held_aside(CASES_DIR)
    cases = [load_case(p, with_printed_kv=False) for p in paths]
    cases = [c for c in cases if c.predict]
    ours = wizard = 0
    print(f"input: {CASES_DIR.relative_to(CASES_DIR.parents[2])}; baseline: vllm-wizard's planner on the same cases")
    print(f"{'case':52} {'vLLM':>6} {'fit':>6} {'wizard':>7}")
    for case in cases:
        predicted = fit(case.request).starts
        baseline = wizard_starts(case)
        ours += predicted is case.starts
        wizard += baseline is case.starts
        print(f"{case.name:52} {case.starts!s:>6} {predicted!s:>6} {baseline!s:>7}")
    n = len(cases)
    print(f"cases: {n} ({'all predictable' if '--all' in sys.argv else 'held aside'})")
    print(f"llmtriage fit accuracy: {ours}/{n} = {ours / n:.0%}")
    print(f"vllm-wizard accounting accuracy (baseline): {wizard}/{n} = {wizard / n:.0%}")
    ratio = f"{(ours / n) / (wizard / n):.2f}x" if wizard else "inf (the baseline got none right)"
    print(f"ratio (llmtriage fit / vllm-wizard): {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
