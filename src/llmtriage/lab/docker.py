"""`docker run vllm/vllm-openai ...` for given settings: the command `llmtriage serve` prints, and the lab's
Docker target runs where an engine exists."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llmtriage.errors import UnavailableError
from llmtriage.evidence.live import health_status

DEFAULT_IMAGE = "vllm/vllm-openai:latest"
DEFAULT_MODEL = "Qwen/Qwen2.5-7B-Instruct"
CONTAINER_PORT = 8000
DOCKER_TIMEOUT_S = 60


def docker_engine_problem() -> str | None:
    """None when `docker info` answers; else why Docker cannot run containers here."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    try:
        probe = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return "docker info did not answer in 20 s"
    if probe.returncode != 0:
        lines = (probe.stderr or probe.stdout).strip().splitlines()
        return "no Docker engine: " + (lines[-1] if lines else f"docker info exited {probe.returncode}")
    return None


def run_command(model: str, port: int, name: str, flags: Sequence[str] = (), image: str = DEFAULT_IMAGE) -> list[str]:
    """The `docker run` argv: GPUs, host IPC for NCCL, the HF cache mounted, the port, then vLLM's flags."""
    return [
        "docker", "run", "-d", "--name", name, "--gpus", "all", "--ipc=host",
        "-v", "~/.cache/huggingface:/root/.cache/huggingface", "-e", "HF_TOKEN",
        "-p", f"{port}:{CONTAINER_PORT}", image, "--model", model, *flags,
    ]  # fmt: skip


def stop_command(name: str) -> list[str]:
    """The argv that stops and removes the container."""
    return ["docker", "rm", "-f", name]


def shell(argv: Sequence[str]) -> str:
    """argv as one shell line (the volume's ~ left for the shell to expand)."""
    return " ".join(a if a.startswith("~/") or "=~" in a else shlex.quote(a) for a in argv)


@dataclass
class DockerContainer:
    """One vLLM container the lab started; its logs are followed into a file."""

    name: str
    command: list[str]
    port: int
    log_path: Path
    _follower: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> DockerContainer:
        """`docker run -d`, then `docker logs -f` into the log file."""
        started = subprocess.run(self.command, capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=False)
        if started.returncode != 0:
            raise UnavailableError(f"docker run failed: {started.stderr.strip()[-300:]}")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as out:
            self._follower = subprocess.Popen(
                ["docker", "logs", "-f", "--timestamps", self.name], stdout=out, stderr=out
            )
        return self

    def _running(self) -> bool:
        state = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Running}}", self.name], capture_output=True, text=True, check=False
        )
        return state.stdout.strip() == "true"

    def wait(self, timeout_s: float = 900.0) -> bool:
        """True once /health answers 200; False when the container exits first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if health_status(self.url) == 200:
                return True
            if not self._running():
                return False
            time.sleep(2)
        raise UnavailableError(f"the container did not become ready in {timeout_s:.0f} s", f"docker logs {self.name}")

    def stop(self) -> None:
        """Remove the container and stop following its logs."""
        subprocess.run(stop_command(self.name), capture_output=True, timeout=DOCKER_TIMEOUT_S, check=False)
        if self._follower is not None:
            self._follower.terminate()
            self._follower.wait(timeout=10)
