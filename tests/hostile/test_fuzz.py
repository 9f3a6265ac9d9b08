"""Property-based fuzz of every parser (Hypothesis): whatever the bytes, a parser returns what it could read and a
problem list, never an exception; and a diagnosis of fuzzed evidence always serialises to strict JSON.

Inputs mix random text with lines of real recordings, so the parsers are driven past their first checks.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmtriage.bench.result import bench_figures
from llmtriage.diagnose.engine import diagnose
from llmtriage.errors import UsageError
from llmtriage.evidence.bundle import read_evidence
from llmtriage.facts import LogFacts
from llmtriage.parse import dmesg, launch, logs, model_config, nvidia_smi, prom
from llmtriage.runbook import markdown
from llmtriage.strict_json import finite

from ..conftest import FIXTURES

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _real_lines(*paths: Path) -> list[str]:
    lines: list[str] = []
    for path in paths:
        lines += path.read_text(errors="replace").splitlines()[:400]
    return lines


REAL = _real_lines(
    FIXTURES / "vllm-cpu" / "logs" / "fault-b-kv-cache-too-small.log",
    FIXTURES / "vllm-cpu" / "logs" / "fault-c-kv-pressure.log",
    FIXTURES / "vllm-cpu" / "metrics" / "kv-pressure-at-peak-waiting.txt",
    *sorted((FIXTURES / "nvidia-smi").glob("*.txt")),
    *sorted((FIXTURES / "dmesg").glob("*.txt")),
)


def _mutated(line: str, cut: int, junk: str) -> str:
    return line[: cut % (len(line) + 1)] + junk


texts = st.lists(
    st.one_of(
        st.text(max_size=200),
        st.sampled_from(REAL),
        st.builds(_mutated, st.sampled_from(REAL), st.integers(0, 400), st.text(max_size=40)),
    ),
    max_size=40,
).map("\n".join)


@FUZZ
@given(st.binary(max_size=4096) | texts.map(str.encode))
def test_the_log_reader(data: bytes) -> None:
    facts = LogFacts()
    logs.read_log(io.BytesIO(data), "fuzz.log", facts)
    assert facts.lines_scanned >= 0


@FUZZ
@given(texts)
def test_the_text_parsers(text: str) -> None:
    prom.parse_metrics(text, "fuzz.prom", 1.0)
    nvidia_smi.parse_table(text, "fuzz.txt")
    nvidia_smi.parse_query(text, "fuzz.txt")
    nvidia_smi.parse_csv(text, "fuzz.csv")
    dmesg.parse_dmesg(text, "fuzz.txt")
    config = launch.parse_launch(text, "fuzz.launch")
    launch.apply_env(config, text, "fuzz.env")
    model_config.parse_model_config(text, "fuzz.json")
    bench_figures(text, "fuzz.json")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=30,
)


@FUZZ
@given(json_values)
def test_the_json_parsers(value: object) -> None:
    text = json.dumps(value)
    model_config.parse_model_config(text, "config.json")
    bench_figures(text, "result.json")
    bench_figures(json.dumps({"schema_version": 1, "summary": value}), "result.json")


@FUZZ
@given(texts)
def test_the_runbook_document_reader(text: str) -> None:
    # A document it cannot read is a UsageError naming the line: that is its contract, not a crash.
    with contextlib.suppress(UsageError):
        markdown.parse(text, "fuzz.md")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=texts, scrape=texts, smi=texts, kernel=texts, launch_line=texts)
def test_a_fuzzed_bundle_gives_a_diagnosis_in_strict_json(
    log: str, scrape: str, smi: str, kernel: str, launch_line: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, text in (
            ("logs/server.log", log),
            ("metrics/scrape-1700000000.prom", scrape),
            ("gpu/nvidia-smi.txt", smi),
            ("kernel/dmesg.txt", kernel),
            ("config/launch.txt", launch_line),
        ):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        result = diagnose(read_evidence(root))
        json.loads(json.dumps(finite(result.to_dict()), allow_nan=False))
