"""Shared test helpers: fixture paths and incident bundles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

FIXTURES = Path(__file__).parent / "fixtures"
INCIDENTS = sorted((FIXTURES / "incidents").glob("*.yaml"))

_BUNDLE_PATHS = {
    "logs": "logs/server.log",
    "nvidia_smi": "gpu/nvidia-smi.txt",
    "dmesg": "kernel/dmesg.txt",
    "metrics": "metrics/scrape-0.prom",
}


def load_incident(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def incident_bundle(incident: dict[str, Any], root: Path) -> Path:
    """Lay an incident's evidence out as a bundle directory under ``root``."""
    evidence = incident.get("evidence") or {}
    for key, rel in _BUNDLE_PATHS.items():
        if evidence.get(key):
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(evidence[key])
    if incident.get("launch"):
        target = root / "config" / "launch.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(incident["launch"])
    return root


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
