"""Start real `llmtriage sim` processes on loopback ports for the tests."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llmtriage.lab.process import free_port


class RunningSim:
    """One simulator process."""

    def __init__(self, args: list[str], workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"sim-{self.port}.log"
        cmd = [
            sys.executable, "-m", "llmtriage", "sim", "--port", str(self.port), "--quiet",
            "--log-file", str(self.log_path), "--startup-seconds", "0", *args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def wait_ready(self, timeout_s: float = 30.0) -> bool:
        """True once /health answers 200; False if the process exits first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if self.get("/health", timeout=1.0)[0] == 200:
                    return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.05)
        raise TimeoutError("the simulator did not become ready")

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout_s)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., RunningSim]]:
    started: list[RunningSim] = []

    def start(*args: str) -> RunningSim:
        sim = RunningSim(list(args), tmp_path)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()
