"""Every log signature finds its own example line through the real scanner, and no error signature fires on the
lines of a healthy real server."""

from __future__ import annotations

import dataclasses
import io
import re

import pytest

from llmtriage import catalog
from llmtriage.facts import LogFacts
from llmtriage.parse.logs import read_log

from ..conftest import FIXTURES

# Logs of a real vLLM (CPU) that started and served normally (tests/fixtures/vllm-cpu/README.md).
HEALTHY_LOGS = ("startup-ok.log", "start-eager.log", "lab-prefill-jam.log")
WITH_EXAMPLE = [s for s in catalog.signatures() if s.example and s.role != "frame"]


def _read(text: str) -> LogFacts:
    facts = LogFacts()
    read_log(io.BytesIO(text.encode("utf-8")), "example", facts)
    return facts


@pytest.mark.parametrize("sig", WITH_EXAMPLE, ids=[s.id for s in WITH_EXAMPLE])
def test_a_signature_reads_its_own_example(sig: catalog.Signature) -> None:
    line = sig.example.splitlines()[0] if sig.role not in ("error", "wrapper", "context") else sig.example
    facts = _read(line + "\n")
    found = {e.signature for e in facts.events} | {p.signature for p in facts.stats}
    if sig.role in ("fact", "access"):
        assert sig.regex.search(line), sig.id
        return
    assert sig.id in found, f"{sig.id}: its example gave {sorted(found)}"


def test_signature_ids_and_files() -> None:
    sigs = catalog.signatures()
    assert len({s.id for s in sigs}) == len(sigs)
    for sig in sigs:
        assert sig.regex.pattern == sig.pattern  # compiles (the catalog compiles a pattern on first use only)
        # Hyperscan matches bytes: a multi-byte character inside [...] would stand for its single bytes.
        classes = re.findall(r"\[(?:\\.|[^\]\\])*\]", sig.pattern)
        assert all(c.isascii() for c in classes), f"{sig.id}: non-ASCII in a character class"
        if sig.role in ("error", "wrapper"):
            assert sig.family in catalog.FAMILIES, sig.id
        if sig.fallback:
            assert sig.role == "error" and sig.phase == "unplaced", sig.id


@pytest.mark.parametrize("name", HEALTHY_LOGS)
def test_no_error_fires_on_a_healthy_real_server(name: str) -> None:
    facts = LogFacts()
    with (FIXTURES / "vllm-cpu" / "logs" / name).open("rb") as f:
        read_log(f, name, facts)
    # A stop prints EngineDeadError and friends: shutdown artefacts, not failures (marker_shutdown says when).
    errors = [(e.line, e.signature) for e in facts.events if e.role in ("error", "wrapper") and e.stage != "shutdown"]
    assert not errors, errors


def test_a_bad_pattern_is_named_when_first_used() -> None:
    bad = dataclasses.replace(catalog.signatures()[0], id="broken_example", pattern="unclosed (group")
    with pytest.raises(catalog.CatalogError, match="broken_example: bad pattern"):
        _ = bad.regex
