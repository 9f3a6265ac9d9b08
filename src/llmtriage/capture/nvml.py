"""NVML through one chokepoint (after nvitop's ``nvmlQuery``): lazy init, and a query that fails becomes a
value of None plus the reason, never an exception. nvidia-ml-py (``pynvml``) is imported on first use.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Reading(Generic[T]):
    """A value read from NVML, or None and why not."""

    value: T | None
    reason: str | None = None


class Nvml:
    """The NVML library of this host, or a stand-in with the same names (functions, ``NVMLError``) for tests."""

    def __init__(self, lib: Any = None) -> None:
        self._lib = lib
        self._lock = threading.Lock()
        self._state: str | None = None  # None: not tried; "" up; else why it is down

    def start(self) -> str | None:
        """Initialise NVML once; None when it is up, else why it is not (the reason is kept)."""
        with self._lock:
            if self._state is None:
                self._state = self._init()
            return self._state or None

    def _init(self) -> str:
        if self._lib is None:
            try:
                self._lib = importlib.import_module("pynvml")
            except ImportError as e:
                return f"nvidia-ml-py is not installed ({e})"
        try:
            self._lib.nvmlInit()
        except self._lib.NVMLError as e:
            return f"NVML init failed: {_describe(e)}"
        return ""

    def query(self, function: str, *args: Any) -> Reading[Any]:
        """Call NVML's ``function(*args)``; a missing function or an NVML error becomes the reason."""
        why = self.start()
        if why is not None:
            return Reading(None, why)
        func = getattr(self._lib, function, None)
        if func is None:
            return Reading(None, f"{function} is not in this nvidia-ml-py")
        try:
            return Reading(func(*args))
        except self._lib.NVMLError as e:
            return Reading(None, f"{function}: {_describe(e)}")

    def constant(self, name: str) -> Any:
        """A constant of the library (``NVML_CLOCK_SM``...)."""
        return getattr(self._lib, name)

    def stop(self) -> None:
        """Shut NVML down if it was started."""
        with self._lock:
            if self._state == "" and self._lib is not None:
                with contextlib.suppress(self._lib.NVMLError):  # shutting down: nothing left to report to
                    self._lib.nvmlShutdown()
            self._state = None


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
