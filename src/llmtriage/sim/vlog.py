"""Log lines in vLLM 0.32's shapes: ``(APIServer pid=N) INFO MM-DD HH:MM:SS [file.py:line] message``,
uvicorn's access lines, the periodic stats line, and the tracebacks of its failures. The same parsers that
read a real vLLM log read these (a conformance test checks it).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TextIO

STATUS_PHRASES = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Request Entity Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class VllmLog:
    """Writes vLLM-shaped lines to stdout and, when given, a log file; flushes every line."""

    def __init__(self, log_file: Path | None = None, echo: bool = True) -> None:
        self.api_pid = os.getpid()
        self.engine_pid = self.api_pid + 1
        self.worker_pid = self.api_pid + 2
        self._file: TextIO | None = log_file.open("a", encoding="utf-8", buffering=1) if log_file else None
        self._echo = echo

    @property
    def enabled(self) -> bool:
        """Whether a line goes anywhere: callers skip formatting the busy ones (access, stats) when not."""
        return self._echo or self._file is not None

    def close(self) -> None:
        """Close the log file."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def raw(self, line: str) -> None:
        """Write one line as it is."""
        if self._echo:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        if self._file is not None:
            self._file.write(line + "\n")

    def _line(self, process: str, pid: int, level: str, where: str, message: str) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        self.raw(f"({process} pid={pid}) {level} {stamp} [{where}] {message}")

    def api(self, message: str, where: str = "api_server.py:1", level: str = "INFO") -> None:
        """A line of the API server process."""
        self._line("APIServer", self.api_pid, level, where, message)

    def engine(self, message: str, where: str = "core.py:133", level: str = "INFO") -> None:
        """A line of the EngineCore process."""
        self._line("EngineCore", self.engine_pid, level, where, message)

    def worker(self, message: str, where: str = "gpu_worker.py:1", level: str = "INFO") -> None:
        """A line of the GPU worker process."""
        self._line("Worker", self.worker_pid, level, where, message)

    def access(self, peer: str, method: str, path: str, status: int) -> None:
        """uvicorn's access line."""
        phrase = STATUS_PHRASES.get(status, "")
        self.raw(f'INFO:     {peer} - "{method} {path} HTTP/1.1" {status} {phrase}'.rstrip())

    def traceback(self, process: str, where: str, frames: list[tuple[str, int, str, str]], error: str) -> None:
        """An ERROR-prefixed Python traceback as vLLM's EngineCore prints it: (file, line, function, code) frames."""
        pid = self.engine_pid if process == "EngineCore" else self.api_pid
        self._line(process, pid, "ERROR", where, "Traceback (most recent call last):")
        for path, lineno, function, code in frames:
            self._line(process, pid, "ERROR", where, f'  File "{path}", line {lineno}, in {function}')
            self._line(process, pid, "ERROR", where, f"    {code}")
        self._line(process, pid, "ERROR", where, error)
