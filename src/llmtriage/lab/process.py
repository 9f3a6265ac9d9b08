"""What the lab's real servers share: a free loopback port, a command run with its output kept in a log (and its
progress told while it runs), and a server process started in its own session, waited on until /health answers,
and stopped with everything it started."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Self

from llmtriage.errors import UnavailableError
from llmtriage.evidence.live import health_status

PROGRESS_EVERY_S = 10.0


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_logged(
    cmd: Sequence[str],
    timeout_s: float,
    log: Path,
    what: str,
    progress: Callable[[str], None] | None = None,
    every_s: float = PROGRESS_EVERY_S,
    status: Callable[[Path, int], str] | None = None,
) -> None:
    """Run ``cmd`` with its output appended to ``log``; every ``every_s`` while it runs, ``progress`` hears how long
    it has run and, with ``status``, how far it has got (``status`` reads the log from where this command began)."""
    with log.open("ab") as out:
        offset = out.tell()
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        while True:
            try:
                returncode = proc.wait(timeout=every_s)
                break
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - started
                if elapsed > timeout_s:
                    proc.kill()
                    proc.wait()
                    raise UnavailableError(f"{what} timed out after {timeout_s:.0f} s", f"see {log}") from None
                if progress is not None:
                    progress(f"{what}: {elapsed:.0f} s" + (f", {status(log, offset)}" if status else ""))
    if returncode != 0:
        raise UnavailableError(f"{what} failed (exit {returncode})", f"see {log}")


@dataclass(kw_only=True)
class LocalServer:
    """A server process on 127.0.0.1 in a session of its own, its output kept in ``log_path``."""

    NAME: ClassVar[str] = "the server"
    READY_TIMEOUT_S: ClassVar[float] = 300.0
    READY_POLL_S: ClassVar[float] = 0.5
    STOP_TIMEOUT_S: ClassVar[float] = 30.0

    log_path: Path
    port: int = field(default_factory=free_port)
    args: Sequence[str] = ()
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The launch command line."""
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The environment the server runs with."""
        return dict(os.environ)

    def start(self) -> Self:
        """Launch the server process (returns at once; see :meth:`wait`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as out:
            self.process = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, env=self.environment(), start_new_session=True
            )
        return self

    def wait(self, timeout_s: float | None = None) -> bool:
        """True once /health answers 200; False when the process exits first (a failed start)."""
        assert self.process is not None, "start() first"
        timeout_s = self.READY_TIMEOUT_S if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if health_status(self.url) == 200:
                return True
            time.sleep(self.READY_POLL_S)
        raise UnavailableError(f"{self.NAME} did not become ready in {timeout_s:.0f} s", f"see {self.log_path}")

    def wait_exit(self, timeout_s: float | None = None) -> int:
        """Wait for the process to end on its own; its exit code."""
        assert self.process is not None, "start() first"
        return self.process.wait(timeout=self.READY_TIMEOUT_S if timeout_s is None else timeout_s)

    def stop(self) -> None:
        """SIGTERM the process group, then SIGKILL what is left."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=self.STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=self.STOP_TIMEOUT_S)
        except ProcessLookupError:
            pass

    def log(self) -> str:
        """Everything the server printed."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
