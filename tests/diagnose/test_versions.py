"""A version note when the engine version lies in a known regression's range and the diagnosis is of its class
(catalog/engine_regressions.yaml). The torchcodec traceback is the real one of meta-pytorch/torchcodec#1131 (the
error vLLM 0.25.0 raised at start without FFmpeg, vllm-project/vllm#47888); the version line is the one vLLM's API
server prints, with the version under test."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from llmtriage.cli import app
from llmtriage.diagnose.engine import diagnose
from llmtriage.diagnose.versions import regressions, release_key, version_notes
from llmtriage.evidence.bundle import read_evidence

SCHEMA = json.loads(resources.files("llmtriage").joinpath("schemas/diagnosis.schema.json").read_text())

VLLM_TORCHCODEC = (
    "INFO 11-20 09:12:01 [api_server.py:1896] vLLM API server version {version}\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib64/python3.12/site-packages/torchcodec/_core/ops.py", line 104, in <module>\n'
    "    ffmpeg_major_version, core_library_path = load_torchcodec_shared_libraries()\n"
    '  File "/usr/local/lib64/python3.12/site-packages/torchcodec/_core/ops.py", line 75, in '
    "load_torchcodec_shared_libraries\n"
    "    raise RuntimeError(\n"
    "RuntimeError: Could not load libtorchcodec. Likely causes:\n"
    "          1. FFmpeg is not properly installed in your environment. We support\n"
)


def _diagnosed(root: Path, log: str) -> dict[str, object]:
    (root / "logs").mkdir(parents=True)
    (root / "logs/server.log").write_text(log)
    result = diagnose(read_evidence(root)).to_dict()
    jsonschema.validate(result, SCHEMA)
    return result


def test_a_startup_failure_on_the_regressed_release_carries_the_note(tmp_path: Path) -> None:
    result = _diagnosed(tmp_path, VLLM_TORCHCODEC.format(version="0.25.0"))
    assert result["symptom_class"] == "startup_failure" and result["engine_version"] == "0.25.0"
    (note,) = result["version_notes"]  # type: ignore[misc]
    assert (note["introduced"], note["fixed"]) == ("0.25.0", "0.25.1")
    assert "FFmpeg" in note["note"] and "https://github.com/vllm-project/vllm/pull/47888" in note["source"]


@pytest.mark.parametrize("version", ["0.24.2", "0.25.1", "0.26.0"])
def test_releases_outside_the_range_carry_none(tmp_path: Path, version: str) -> None:
    result = _diagnosed(tmp_path, VLLM_TORCHCODEC.format(version=version))
    assert result["symptom_class"] == "startup_failure" and result["version_notes"] == []


def test_another_class_on_the_regressed_release_carries_none(tmp_path: Path) -> None:
    log = (
        "INFO 11-20 09:12:01 [api_server.py:1896] vLLM API server version 0.25.0\n"
        "INFO 11-20 09:13:40 [launcher.py:37] Available routes are:\n"
        'INFO:     127.0.0.1:50000 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    )
    result = _diagnosed(tmp_path, log)
    assert result["symptom_class"] == "healthy" and result["version_notes"] == []


def test_release_keys_order_as_releases_do() -> None:
    assert release_key("vllm", "0.6.3.post1") == (0, 6, 3) < release_key("vllm", "v0.10.1rc1") == (0, 10, 1)
    assert release_key("llama_cpp", "b4409") == (4409,) < release_key("llama_cpp", "4552 (f8feb4b0)")
    assert release_key("tgi", "not a version") == ()
    assert version_notes("llama_cpp", "b4500", "startup_failure")[0].fixed == "b4552"
    assert version_notes("llama_cpp", "b4552", "startup_failure") == []
    assert version_notes("vllm", "garbage", "startup_failure") == []


def test_every_catalogued_regression_has_a_source_and_a_range() -> None:
    for regression in regressions():
        assert regression.source and all(url.startswith("https://github.com/") for url in regression.source)
        assert release_key(regression.engine, regression.introduced) < release_key(regression.engine, regression.fixed)


def test_the_text_report_shows_the_note(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs/server.log").write_text(VLLM_TORCHCODEC.format(version="0.25.0"))
    out = CliRunner().invoke(app, ["diagnose", str(tmp_path)], env={"COLUMNS": "200"})
    assert "Known regression of this version" in out.output and "0.25.0 to 0.25.1" in out.output


def test_the_html_report_shows_the_note_escaped(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs/server.log").write_text(VLLM_TORCHCODEC.format(version="0.25.0"))
    page = tmp_path / "report.html"
    done = CliRunner().invoke(app, ["report", str(tmp_path), "-o", str(page)])
    assert done.exit_code == 0, done.output
    html = page.read_text()
    assert 'class="small version-note">Known regression: vllm 0.25.0 has a known regression (0.25.0 to 0.25.1)' in html
    assert '<a href="https://github.com/vllm-project/vllm/pull/47888">' in html
