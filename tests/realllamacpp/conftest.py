"""A real llama.cpp ``llama-server`` (CPU) for the tests: built once from llama-cpp-python's sdist into
`.cache/`, serving a tiny GGUF written locally.

The first run downloads the sdist and builds only the llama-server target (several minutes on 2 cores); later
runs reuse the binary. Set LLMTRIAGE_SKIP_REAL_LLAMACPP=1 to skip these tests locally.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmtriage.lab.llamacpp_cpu import BUILD_TIMEOUT_S, LlamaServer, ensure_llama_server, ensure_tiny_gguf

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
SKIP = os.environ.get("LLMTRIAGE_SKIP_REAL_LLAMACPP") == "1"

pytestmark = pytest.mark.skipif(SKIP, reason="LLMTRIAGE_SKIP_REAL_LLAMACPP=1")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The first selected test that needs llama-server builds it: it gets the build's time on top of its own."""
    first = next((item for item in items if "llama_env" in getattr(item, "fixturenames", ())), None)
    if first is not None:
        first.add_marker(pytest.mark.timeout(BUILD_TIMEOUT_S + 300))


@dataclass(frozen=True)
class LlamaEnv:
    binary: Path
    model: Path


@pytest.fixture(scope="session")
def llama_env(request: pytest.FixtureRequest) -> LlamaEnv:
    if SKIP:
        pytest.skip("LLMTRIAGE_SKIP_REAL_LLAMACPP=1")
    capture = request.config.pluginmanager.getplugin("capturemanager")

    def progress(message: str) -> None:
        # Shown while pytest captures output: the first build takes minutes.
        with capture.global_and_fixture_disabled():
            print(f"\n[llama-server] {message}", file=sys.stderr, flush=True)

    binary = ensure_llama_server(CACHE, progress)
    return LlamaEnv(binary=binary, model=ensure_tiny_gguf(CACHE))


ServerFactory = Callable[..., LlamaServer]


@pytest.fixture
def llama_server(llama_env: LlamaEnv, tmp_path: Path) -> Iterator[ServerFactory]:
    """A factory of real llama-servers, all stopped at the end of the test."""
    started: list[LlamaServer] = []

    def make(*args: str, model: Path | None = None, port: int | None = None) -> LlamaServer:
        server = LlamaServer(
            binary=llama_env.binary,
            model=llama_env.model if model is None else model,
            log_path=tmp_path / f"llama-server-{len(started)}.log",
            args=args,
        )
        if port is not None:
            server.port = port
        started.append(server)
        return server.start()

    yield make
    for server in started:
        server.stop()
