"""The engine records a step's inter-token gaps with one counted observation per distinct gap: the scrape must read as
if each token had been observed on its own."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmtriage.sim.metrics import ITL_BUCKETS, observe_many


def _samples(registry: CollectorRegistry) -> dict[str, float]:
    (family,) = (f for f in text_string_to_metric_families(generate_latest(registry).decode()) if f.name == "itl")
    return {s.name + s.labels.get("le", ""): s.value for s in family.samples if not s.name.endswith("_created")}


def test_counted_observations_read_as_one_observe_each() -> None:
    counted, single = CollectorRegistry(), CollectorRegistry()
    a = Histogram("itl", "gaps", buckets=ITL_BUCKETS, registry=counted)
    b = Histogram("itl", "gaps", buckets=ITL_BUCKETS, registry=single)
    # Below the first bucket, on a bound, between bounds, past the last bound (+Inf).
    for value, count in ((0.004, 3), (0.025, 4000), (0.3333, 7), (120.0, 2)):
        observe_many(a, value, count)
        for _ in range(count):
            b.observe(value)
    ours, theirs = _samples(counted), _samples(single)
    assert ours.keys() == theirs.keys()
    for name, value in theirs.items():
        assert ours[name] == pytest.approx(value, rel=1e-12), name
