"""The seed entries a new runbook starts with (seeds.yaml): one per classic fault of the flowchart."""

from __future__ import annotations

from pathlib import Path

from llmtriage import catalog
from llmtriage.runbook.entry import Entry, check_ids

SEEDS_SCHEMA_VERSION = 1


def seed_uid(cause: str) -> str:
    """The stable uid of a cause's seed entry (seeding twice adds nothing)."""
    return f"seed-{cause}"


def seeds(recorded_at: str) -> list[Entry]:
    """The seed entries of seeds.yaml, checked against the tree."""
    data = catalog.load_packaged_yaml(Path(__file__).with_name("seeds.yaml"))
    if data.get("schema_version") != SEEDS_SCHEMA_VERSION:
        raise ValueError(f"seeds.yaml: schema_version {data.get('schema_version')!r}, expected {SEEDS_SCHEMA_VERSION}")
    entries = []
    for raw in data["seeds"]:
        check_ids(raw["symptom_class"], raw["cause"])
        entries.append(
            Entry(
                uid=seed_uid(raw["cause"]),
                recorded_at=recorded_at,
                symptom_class=raw["symptom_class"],
                cause=raw["cause"],
                evidence=tuple(raw["evidence"]),
                fix=raw["fix"],
                notes=raw["notes"],
                seed=True,
            )
        )
    return entries
