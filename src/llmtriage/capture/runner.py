"""The one seam every external command of a capture goes through.

:class:`SubprocessRunner` runs a command for real, read-only, with a wall-clock limit and an output cap, and
stops it early when the capture is interrupted; :class:`ReplayRunner` answers from recorded outputs, so tests
replay real captures instead of mocking internals. Both return a :class:`CommandResult`, never raise.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

STDERR_MAX_BYTES = 64 << 10
_READ_CHUNK_BYTES = 64 << 10
_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class Limits:
    """How long a command (or a source) may run, and how much output it may keep."""

    timeout_s: float
    max_bytes: int


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one command did. ``exit_code`` is None when it never started or was stopped before it ended."""

    argv: tuple[str, ...]
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    duration_s: float
    truncated: bool = False
    timed_out: bool = False
    interrupted: bool = False
    start_error: str | None = None

    @property
    def ok(self) -> bool:
        """True when it ran to the end and exited 0."""
        return self.exit_code == 0 and not self.timed_out and not self.interrupted

    @property
    def usable(self) -> bool:
        """Its output can be kept: it exited 0, or it was cut at the output cap (which only a started command is)."""
        return self.ok or self.truncated

    def why(self) -> str:
        """Why it failed (or what ended it), in one line."""
        if self.start_error is not None:
            return self.start_error
        if self.interrupted:
            return "stopped: the capture was interrupted"
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f} s"
        detail = last_line(self.stderr) or last_line(self.stdout)
        code = f"exit code {self.exit_code}"
        return f"{code}: {detail}" if detail else code


def last_line(data: bytes) -> str:
    """The last non-blank line of a command's output, stripped, at most 300 characters."""
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


class CommandRunner(Protocol):
    """Runs one command; never raises for the command's own failures."""

    def run(
        self, argv: Sequence[str], limits: Limits, stop: threading.Event, *, merge_stderr: bool = False
    ) -> CommandResult:
        """Run ``argv`` within ``limits``; end it early when ``stop`` is set. ``merge_stderr`` interleaves
        stderr into stdout (as a terminal would show them)."""


class SubprocessRunner:
    """Runs commands for real: no stdin, C locale, own process group, killed at the limit or on stop."""

    def run(
        self, argv: Sequence[str], limits: Limits, stop: threading.Event, *, merge_stderr: bool = False
    ) -> CommandResult:
        """See :meth:`CommandRunner.run`."""
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                env={**os.environ, "LC_ALL": "C"},
                start_new_session=True,
            )
        except FileNotFoundError:
            return _not_started(argv, f"{argv[0]}: command not found", started)
        except PermissionError:
            return _not_started(argv, f"{argv[0]}: permission denied", started)
        except OSError as e:
            return _not_started(argv, f"{argv[0]}: {e.strerror or e}", started)
        return _Reader(proc, limits, stop, started).collect(tuple(argv))


def _not_started(argv: Sequence[str], why: str, started: float) -> CommandResult:
    return CommandResult(tuple(argv), None, b"", b"", time.monotonic() - started, start_error=why)


class _Reader:
    """Drains a child's pipes within the limits (one thread, a selector), then reaps it."""

    def __init__(self, proc: subprocess.Popen[bytes], limits: Limits, stop: threading.Event, started: float) -> None:
        self.proc = proc
        self.limits = limits
        self.stop = stop
        self.started = started
        self.out = bytearray()
        self.err = bytearray()
        self.truncated = False
        self.timed_out = False
        self.interrupted = False

    def collect(self, argv: tuple[str, ...]) -> CommandResult:
        selector = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        selector.register(self.proc.stdout, selectors.EVENT_READ, self.out)
        if self.proc.stderr is not None:
            selector.register(self.proc.stderr, selectors.EVENT_READ, self.err)
        deadline = self.started + self.limits.timeout_s
        try:
            while selector.get_map():
                if self.stop.is_set():
                    self.interrupted = True
                    break
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    self.timed_out = True
                    break
                for key, _ in selector.select(min(_POLL_S, left_s)):
                    if not self._read(selector, key):
                        break
                if self.truncated:
                    break
        finally:
            selector.close()
            exit_code = self._finish()
        return CommandResult(
            argv=argv,
            exit_code=None if (self.timed_out or self.interrupted or self.truncated) else exit_code,
            stdout=bytes(self.out),
            stderr=bytes(self.err),
            duration_s=time.monotonic() - self.started,
            truncated=self.truncated,
            timed_out=self.timed_out,
            interrupted=self.interrupted,
        )

    def _read(self, selector: selectors.BaseSelector, key: selectors.SelectorKey) -> bool:
        buffer: bytearray = key.data
        chunk = os.read(key.fd, _READ_CHUNK_BYTES)
        if not chunk:
            selector.unregister(key.fileobj)
            return True
        cap = self.limits.max_bytes if buffer is self.out else STDERR_MAX_BYTES
        room = cap - len(buffer)
        buffer.extend(chunk[: max(room, 0)])
        if len(chunk) > room and buffer is self.out:
            self.truncated = True
            return False
        return True

    def _finish(self) -> int | None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None


@dataclass(frozen=True, slots=True)
class Recording:
    """A command's recorded answer (stdout, stderr, exit code), or the error it could not start with."""

    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int | None = 0
    start_error: str | None = None


ANY_REST = "*"


@dataclass(slots=True)
class ReplayRunner:
    """Answers commands from recordings and records every call. A recording's key is the whole argv, or an
    argv prefix ending in ``"*"`` (any further arguments); the exact key wins, then the longest prefix.

    A command without a recording answers like a program that is not installed.
    """

    recordings: Mapping[tuple[str, ...], Recording]
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def run(
        self, argv: Sequence[str], limits: Limits, stop: threading.Event, *, merge_stderr: bool = False
    ) -> CommandResult:
        """See :meth:`CommandRunner.run`; applies the output cap as the real runner does."""
        key = tuple(argv)
        self.calls.append(key)
        if stop.is_set():
            return CommandResult(key, None, b"", b"", 0.0, interrupted=True)
        recording = self._find(key)
        if recording is None:
            return CommandResult(key, None, b"", b"", 0.0, start_error=f"{key[0]}: command not found")
        if recording.start_error is not None:
            return CommandResult(key, None, b"", b"", 0.0, start_error=recording.start_error)
        stdout = recording.stdout + recording.stderr if merge_stderr else recording.stdout
        truncated = len(stdout) > limits.max_bytes
        return CommandResult(
            argv=key,
            exit_code=None if truncated else recording.exit_code,
            stdout=stdout[: limits.max_bytes],
            stderr=b"" if merge_stderr else recording.stderr[:STDERR_MAX_BYTES],
            duration_s=0.0,
            truncated=truncated,
        )

    def _find(self, argv: tuple[str, ...]) -> Recording | None:
        if argv in self.recordings:
            return self.recordings[argv]
        prefixes = [k for k in self.recordings if k and k[-1] == ANY_REST and argv[: len(k) - 1] == k[:-1]]
        return self.recordings[max(prefixes, key=len)] if prefixes else None
