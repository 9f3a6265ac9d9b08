"""Fingerprints: the same fault agrees whatever its numbers, paths, pids and times; different faults differ."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtriage.evidence.bundle import read_evidence
from llmtriage.redact import Redactor
from llmtriage.runbook.fingerprint import Fingerprint, fingerprint, normalise

from ..conftest import INCIDENTS, incident_bundle, load_incident
from .conftest import EXAMPLES, bundle, edited


def print_of(bundle_dir: Path) -> Fingerprint | None:
    return fingerprint(read_evidence(bundle_dir), Redactor().redact_text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[2024-09-05T00:38:34Z] ERROR 09-04 17:38:34 x", "[<time>] error <time> x"),
        ("pid=60914 port 44319 took 1.25 s", "pid=<n> port <n> took <n> s"),
        ("at 0x7f3a2b10 and deadbeef01", "at <hex> and <hex>"),
        ("OSError: '/data1/models/deepseek' or Qwen/Qwen2.5-7B", "oserror: '<path>' or <path>"),
        ("request 3f2b1c4e-1a2b-4c3d-8e9f-0123456789ab failed", "request <id> failed"),
        ("many    spaces\tand tabs", "many spaces and tabs"),
    ],
)
def test_normalise(text: str, expected: str) -> None:
    assert normalise(text) == expected


def test_same_fault_with_other_numbers_times_and_pids_agrees(tmp_path: Path) -> None:
    original = bundle("019", tmp_path)
    other = edited(
        original,
        tmp_path / "other",
        {
            "60858": "7",
            "60914": "123456",
            "44319": "8000",
            "2024-09-05T00:38:34Z": "2031-12-31T23:59:59Z",
            "17:38:34": "03:04:05",
            "09-04": "12-31",
        },
    )
    a, b = print_of(original), print_of(other)
    assert a is not None and a == b
    assert a.signatures == ("server_port_in_use",)
    # The example bundle of the same incident agrees too.
    assert print_of(EXAMPLES / "port-in-use") == a


def test_long_lines_clipped_at_other_places_agree(tmp_path: Path) -> None:
    """A line longer than an excerpt is clipped around the match: other lengths of numbers still agree."""
    line = (
        "(EngineCore_DP0 pid={pid}) ERROR 11-29 14:07:38 [core.py:{n}] {pad}ValueError: The model's max seq len "
        "({max_len}) is larger than the maximum number of tokens that can be stored in KV cache ({kv}). Try "
        "increasing gpu_memory_utilization or decreasing max_model_len when initializing the engine. {tail}\n"
    )
    for name, values in {
        "a": {"pid": 12, "n": 7, "max_len": 4096, "kv": 3664},
        "b": {"pid": 1234567, "n": 1510, "max_len": 131072, "kv": 98304},
    }.items():
        logs = tmp_path / name / "logs"
        logs.mkdir(parents=True)
        (logs / "server.log").write_text(line.format(pad="/opt/venv/x.py " * 8, tail="see /docs " * 30, **values))
    a = print_of(tmp_path / "a")
    assert a is not None and a.signatures == ("vllm_max_seq_len_gt_kv_v0",)
    assert a == print_of(tmp_path / "b")


def test_different_faults_differ(tmp_path: Path) -> None:
    digests = {}
    for path in INCIDENTS:
        found = print_of(incident_bundle(load_incident(path), tmp_path / path.stem))
        if found is not None:
            digests[path.stem] = found.digest
    assert len(digests) >= 12
    assert len(set(digests.values())) == len(digests), digests


def test_no_error_no_fingerprint() -> None:
    assert print_of(EXAMPLES / "healthy") is None


def test_secrets_never_reach_the_digest(tmp_path: Path) -> None:
    """Two incidents that differ only in the token they leaked agree: the digest is of the redacted text."""
    logs = tmp_path / "a" / "logs"
    logs.mkdir(parents=True)
    line = "OSError: Incorrect path_or_model_id: 'meta/llama'. token={}\n"
    (logs / "server.log").write_text(line.format("hf_" + "a" * 34))
    other = edited(tmp_path / "a", tmp_path / "b", {"hf_" + "a" * 34: "hf_" + "b" * 34})
    a = print_of(tmp_path / "a")
    assert a is not None and a == print_of(other)
    # The bundle reader redacts what it reads: even a digest without its own redaction never sees the token.
    assert a == fingerprint(read_evidence(tmp_path / "a"), lambda text: text)
