"""Helpers for the capture tests: recorded command outputs, and a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from llmtriage.capture.runner import Recording

from ..conftest import FIXTURES

RECORDED = FIXTURES / "capture"
VLLM_LOGS = FIXTURES / "vllm-cpu" / "logs"
VLLM_METRICS = FIXTURES / "vllm-cpu" / "metrics"
NVIDIA_SMI = FIXTURES / "nvidia-smi"
DMESG = FIXTURES / "dmesg"
TELEMETRY = RECORDED / "gpu-telemetry.json"


def recorded(name: str) -> Recording:
    """A command output recorded on this machine (tests/fixtures/capture/NAME.{stdout,stderr,rc})."""
    return Recording(
        stdout=(RECORDED / f"{name}.stdout").read_bytes(),
        stderr=(RECORDED / f"{name}.stderr").read_bytes(),
        exit_code=int((RECORDED / f"{name}.rc").read_text()),
    )


def fixture_output(path: Path) -> Recording:
    """A real output kept as a fixture file (its first line, the '# source:' note, is left out)."""
    lines = path.read_bytes().splitlines(keepends=True)
    return Recording(stdout=b"".join(line for line in lines if not line.startswith(b"# source:")))


def telemetry_document(process_name: str = "llmtriage-sim") -> dict[str, Any]:
    """The example document of docs/gpu-telemetry.md (the format the sim serves), its process renamed."""
    document: dict[str, Any] = json.loads(TELEMETRY.read_text())
    document["gpus"][0]["processes"][0]["name"] = process_name
    return document


@dataclass
class LoopbackServer:
    """/metrics answers the scrapes in turn (the last one again and again), /llmtriage/gpu the telemetry."""

    scrapes: list[str]
    telemetry: dict[str, Any] | None = None
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    base_url: str = ""

    async def _metrics(self, request: web.Request) -> web.Response:
        served = sum(1 for path, _ in self.requests if path == "/metrics")
        self.requests.append((request.path, request.headers.get("Authorization")))
        if not self.scrapes:
            return web.Response(status=503, text="not ready")
        return web.Response(text=self.scrapes[min(served, len(self.scrapes) - 1)], content_type="text/plain")

    async def _gpu(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, request.headers.get("Authorization")))
        if self.telemetry is None:
            return web.Response(status=404)
        answer = {**self.telemetry, "timestamp_s": time.time()}
        return web.Response(text=json.dumps(answer), content_type="application/json")

    def serve(self) -> Iterator[LoopbackServer]:
        loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/llmtriage/gpu", self._gpu)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        host, port = runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            loop.run_until_complete(runner.cleanup())
            loop.close()


@pytest.fixture
def loopback() -> Iterator[LoopbackServer]:
    """A server with the recorded healthy /metrics and the documented telemetry; tests may change both."""
    server = LoopbackServer(
        scrapes=[(VLLM_METRICS / "before-load.txt").read_text(), (VLLM_METRICS / "after-load.txt").read_text()],
        telemetry=telemetry_document(),
    )
    yield from server.serve()


def every_file(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (the bundle), by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
