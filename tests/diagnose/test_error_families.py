"""A real line per error family (tests/fixtures/error-families.yaml, each from a public thread) is diagnosed as its
class and first cause when it is the whole log: what a user pasting the last lines of a failed start gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from llmtriage.diagnose.engine import diagnose
from llmtriage.evidence.bundle import LooseFiles, read_evidence

from ..conftest import FIXTURES

CASES: list[dict[str, Any]] = yaml.safe_load((FIXTURES / "error-families.yaml").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[f"{i:02d}-{c['family']}" for i, c in enumerate(CASES)])
def test_a_real_line_of_each_family_names_its_cause(case: dict[str, Any], tmp_path: Path) -> None:
    log = tmp_path / "pasted.log"
    log.write_text(case["log"])
    result = diagnose(read_evidence(loose=LooseFiles(logs=[log])))
    assert result.symptom_class == case["class"], [(s.question_id, s.answer) for s in result.path]
    assert result.causes and result.causes[0].id == case["cause"], [
        (c.id, round(c.confidence, 2)) for c in result.causes
    ]
    assert "pasted.log" in result.causes[0].evidence[0].citation.source, "the cause cites the line it read"


def test_the_families_cover_every_engine_and_layer() -> None:
    engines = {c["family"].split(":")[0] for c in CASES}
    assert {"vllm", "sglang", "tgi", "llama_cpp", "ollama", "cuda", "pytorch", "nccl", "hf"} <= engines, engines
