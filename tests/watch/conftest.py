"""Helpers for the watch tests: real simulators on 127.0.0.1, bounded background load, a real Prometheus, promtool.

promtool and prometheus come from Debian's `prometheus` package (`make dev` installs it through
scripts/ensure-debian-packages.sh). A test that needs them fails, loudly, when they are missing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
import yaml

from llmtriage import catalog
from llmtriage.catalog import Thresholds

from ..conftest import completion
from ..sim.conftest import (
    free_port,
    start_sim,  # noqa: F401 - the simulator fixture, for the watch tests
)

INSTALL_HINT = "run `scripts/ensure-debian-packages.sh prometheus:promtool` (`make dev` does)"


def tool(name: str) -> str:
    """The path of a command the tests need; fails the test when it is not installed."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: {INSTALL_HINT}", pytrace=False)
    return path


@pytest.fixture
def promtool() -> str:
    return tool("promtool")


def fast_thresholds(stall_seconds: float = 3.0) -> Thresholds:
    """The catalog's thresholds with a stall after ``stall_seconds`` (10 s in the catalog), for short tests."""
    return dataclasses.replace(catalog.thresholds(), stall_seconds=stall_seconds)


class Load:
    """Streaming completions sent without pause, ``concurrency`` at a time, until stopped (each bounded)."""

    def __init__(self, url: str, concurrency: int, prompt_tokens: int, max_tokens: int, request_timeout_s: float = 60):
        self.url = url
        self.concurrency = concurrency
        self.payload = completion(prompt_tokens, max_tokens)
        self.request_timeout_s = request_timeout_s
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s)
        connector = aiohttp.TCPConnector(force_close=True, limit=0)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

            async def worker() -> None:
                while not self._stop.is_set():
                    try:
                        async with session.post(self.url + "/v1/completions", json=self.payload) as resp:
                            async for _ in resp.content:
                                if self._stop.is_set():
                                    break
                            self.statuses.append(resp.status)
                    except (aiohttp.ClientError, TimeoutError, OSError):
                        self.statuses.append(0)
                        await asyncio.sleep(0.2)

            async def stopper() -> None:
                while not self._stop.is_set():
                    await asyncio.sleep(0.1)

            workers = [asyncio.create_task(worker()) for _ in range(self.concurrency)]
            await stopper()
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


def wait_until(
    condition: Callable[[], bool], timeout_s: float, what: str, last_seen: Callable[[], object] | None = None
) -> None:
    """Poll ``condition`` every 0.2 s; fail with ``what`` (and ``last_seen()``, what it saw last) when it has not
    held within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    seen = f"; last seen: {last_seen()}" if last_seen is not None else ""
    pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}{seen}")


class RunningPrometheus:
    """A real Prometheus on 127.0.0.1, scraping the given targets every second, with optional rule files."""

    def __init__(self, workdir: Path, targets: list[str], rule_files: list[Path]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": "vllm", "static_configs": [{"targets": targets}]}],
        }
        config_path = workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / "prometheus.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={config_path}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"prometheus exited: {self.log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
