"""One exception hierarchy, mapped to documented exit codes at the CLI boundary.

Exit codes (docs/cli.md):
  0  nothing wrong found
  1  a problem was diagnosed (or a check failed)
  2  usage error (bad arguments or values)
  3  nothing readable in the evidence given
  4  a server, file or tool could not be reached
  5  inconclusive: the evidence shows neither the server serving nor failing
  70 internal error (a bug: please report it)
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes."""

    OK = 0
    PROBLEM_FOUND = 1
    USAGE = 2
    NOTHING_READABLE = 3
    UNAVAILABLE = 4
    INCONCLUSIVE = 5
    INTERNAL = 70


class LlmtriageError(Exception):
    """An error shown to the user as one line plus a hint."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(LlmtriageError):
    """Bad arguments or values."""

    exit_code = ExitCode.USAGE


class NothingReadableError(LlmtriageError):
    """No evidence could be read."""

    exit_code = ExitCode.NOTHING_READABLE


class UnavailableError(LlmtriageError):
    """A server, file or tool could not be reached."""

    exit_code = ExitCode.UNAVAILABLE
