"""The calculator against what real vLLM startups printed (tests/fixtures/fit-cases, each with its source)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llmtriage.capacity import fit
from llmtriage.capacity.cases import held_aside, load_case
from llmtriage.capacity.fit import GIB

CASES_DIR = Path(__file__).parent.parent / "fixtures" / "fit-cases"
CASES = sorted(CASES_DIR.glob("*.yaml"))
# vLLM prints GiB with two decimals: the true figure is within half a hundredth.
PRINT_ROUNDING_GIB = 0.005


def _has(path: Path, key: str) -> bool:
    return key in (yaml.safe_load(path.read_text()).get("printed") or {})


def _predictable(path: Path) -> bool:
    return bool(yaml.safe_load(path.read_text()).get("predict"))


WITH_KV = [p for p in CASES if _has(p, "available_kv_gib")]
PREDICTABLE = [p for p in CASES if _predictable(p)]


def test_every_case_names_its_source() -> None:
    for path in CASES:
        data = yaml.safe_load(path.read_text())
        assert data["source"]["url"].startswith("http"), path.name
        assert data["log"].strip(), path.name


@pytest.mark.parametrize("path", WITH_KV, ids=[p.stem for p in WITH_KV])
def test_given_the_printed_kv_memory_the_figures_match_vllm(path: Path) -> None:
    case = load_case(path, with_printed_kv=True)
    result = fit(case.request)
    assert result.starts is case.starts
    assert result.error == case.error
    token_slack = PRINT_ROUNDING_GIB * GIB / result.kv_bytes_per_token + result.block_size
    if "kv_tokens" in case.printed and case.starts:
        assert abs(result.kv_tokens - case.printed["kv_tokens"]) <= token_slack, result.kv_tokens
    if "num_gpu_blocks" in case.printed:
        assert abs(result.num_gpu_blocks - case.printed["num_gpu_blocks"]) <= token_slack / result.block_size
    if "max_concurrency" in case.printed:
        slack = case.printed["max_concurrency"] * token_slack / max(result.kv_tokens, 1) + 0.01
        assert result.max_concurrency == pytest.approx(case.printed["max_concurrency"], abs=slack)
    if "kv_needed_gib" in case.printed:
        assert result.kv_needed_gib == pytest.approx(case.printed["kv_needed_gib"], abs=PRINT_ROUNDING_GIB)
    if "estimated_max_model_len" in case.printed:
        assert abs(result.max_model_len_that_fits - case.printed["estimated_max_model_len"]) <= token_slack


@pytest.mark.parametrize("path", PREDICTABLE, ids=[p.stem for p in PREDICTABLE])
def test_start_or_fail_predicted_from_model_gpu_and_flags(path: Path) -> None:
    case = load_case(path, with_printed_kv=False)
    result = fit(case.request)
    assert result.available_kv_source == "estimated"
    assert (result.starts, result.error) == (case.starts, case.error), result.detail


def test_held_aside_accuracy_reaches_ninety_percent() -> None:
    paths = held_aside(CASES_DIR)
    assert paths and all(p.exists() and _predictable(p) for p in paths)
    right = sum(fit(c.request).starts is c.starts for c in (load_case(p, with_printed_kv=False) for p in paths))
    assert right / len(paths) >= 0.9


def test_the_v0_activation_estimate_tracks_the_logged_peak() -> None:
    for name in ("vllm-10517-llama31-8b-rtx3090-20k", "vllm-10517-llama31-8b-rtx3090-29k"):
        case = load_case(CASES_DIR / f"{name}.yaml", with_printed_kv=False)
        assert fit(case.request).activation_gib == pytest.approx(case.printed["activation_gib"], rel=0.1)
