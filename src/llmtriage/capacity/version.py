"""vLLM versions: which engine (V0 or V1) a version runs, and whether it has reached a change."""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmtriage import catalog
from llmtriage.errors import UsageError

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, slots=True, order=True)
class EngineVersion:
    """A vLLM release, compared by (major, minor, patch); dev and post suffixes are ignored."""

    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    def at_least(self, change: str) -> bool:
        """True when this version already behaves as catalog/capacity.yaml ``vllm.versions[change]`` says."""
        return self >= parse_version(catalog.capacity_facts().vllm.versions[change])

    @property
    def engine(self) -> str:
        """``v1`` from the version that made V1 the default, else ``v0``."""
        return "v1" if self.at_least("v1_default") else "v0"


def parse_version(text: str) -> EngineVersion:
    """``0.6.4.post1``, ``v0.10.1rc1`` or ``0.8`` -> an EngineVersion; anything else is a usage error."""
    m = _VERSION.match(text.strip())
    if m is None:
        raise UsageError(f"--engine-version {text!r}: not a vLLM version", "write it as 0.X.Y, e.g. 0.10.1")
    return EngineVersion(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def default_version() -> EngineVersion:
    """The version assumed when none is given."""
    return parse_version(catalog.capacity_facts().vllm.default_version)
