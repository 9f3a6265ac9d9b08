"""Real llama-server startup failures: each log names the cause, with llama.cpp's own fix."""

from __future__ import annotations

import socket
from pathlib import Path

from llmtriage.diagnose.engine import diagnose
from llmtriage.diagnose.model import Diagnosis
from llmtriage.evidence.bundle import LooseFiles, read_evidence
from llmtriage.lab.llamacpp_cpu import LlamaServer

from .conftest import LlamaEnv, ServerFactory


def _failed(server: LlamaServer) -> Diagnosis:
    assert server.wait() is False, "llama-server started where it should have failed"
    assert server.wait_exit() == 1
    return diagnose(read_evidence(loose=LooseFiles(logs=[server.log_path])))


def test_real_port_in_use(llama_server: ServerFactory) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = _failed(llama_server(port=port))
    assert (result.symptom_class, result.causes[0].id) == ("startup_failure", "port_in_use")
    assert f"grep :{port}`" in result.causes[0].fixes[0]


def test_real_missing_gguf(llama_server: ServerFactory, tmp_path: Path) -> None:
    server = llama_server(model=tmp_path / "does-not-exist.gguf")
    result = _failed(server)
    assert "failed to open GGUF file" in server.log()
    assert (result.symptom_class, result.causes[0].id) == ("startup_failure", "model_path_or_permission")
    assert "-m path" in result.causes[0].fixes[0]


def test_real_truncated_gguf(llama_server: ServerFactory, llama_env: LlamaEnv, tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(llama_env.model.read_bytes()[: llama_env.model.stat().st_size // 2])
    server = llama_server(model=truncated)
    result = _failed(server)
    assert "model is corrupted or incomplete" in server.log()
    assert (result.symptom_class, result.causes[0].id) == ("startup_failure", "model_path_or_permission")


def test_real_file_that_is_not_gguf(llama_server: ServerFactory, tmp_path: Path) -> None:
    page = tmp_path / "model.gguf"
    page.write_text("<html>404 Not Found</html>\n")
    server = llama_server(model=page)
    result = _failed(server)
    assert "invalid magic characters" in server.log()
    assert (result.symptom_class, result.causes[0].id) == ("startup_failure", "model_path_or_permission")
