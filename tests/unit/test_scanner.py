"""The line scanner: Hyperscan and Python's re agree, at any chunk size, on any bytes."""

from __future__ import annotations

import io

import pytest

from llmtriage import catalog
from llmtriage.parse import scanner
from llmtriage.parse.scanner import LineScanner, ScanTotals

from ..conftest import FIXTURES

ENGINES = [False] + ([True] if scanner.hyperscan is not None else [])
PATTERNS = [s.pattern for s in catalog.signatures()]


def _scan(data: bytes, use_hyperscan: bool) -> list[tuple[int, bytes, frozenset[int]]]:
    totals = ScanTotals()
    hits = LineScanner(PATTERNS, use_hyperscan=use_hyperscan).scan(io.BytesIO(data), totals)
    return [(h.line_no, h.line, h.pattern_ids) for h in hits]


@pytest.mark.parametrize("use_hyperscan", ENGINES)
def test_line_numbers_point_at_the_matching_line(use_hyperscan: bool) -> None:
    data = b"noise\nmore noise\nValueError: No available memory for the cache blocks.\ntail\n"
    hits = _scan(data, use_hyperscan)
    assert [(n, line) for n, line, _ in hits] == [(3, b"ValueError: No available memory for the cache blocks.")]


@pytest.mark.parametrize("use_hyperscan", ENGINES)
def test_every_real_log_scans_the_same_whatever_the_chunk_size(
    use_hyperscan: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for path in sorted((FIXTURES / "vllm-cpu" / "logs").iterdir()):
        data = path.read_bytes()
        whole = _scan(data, use_hyperscan)
        monkeypatch.setattr(scanner, "CHUNK_BYTES", 97)
        chunked = _scan(data, use_hyperscan)
        monkeypatch.setattr(scanner, "CHUNK_BYTES", 8 << 20)
        assert chunked == whole, path.name
        assert whole or path.suffix != ".log", f"{path.name}: no signature matched a real vLLM log"


@pytest.mark.skipif(scanner.hyperscan is None, reason="hyperscan not installed")
def test_hyperscan_and_re_find_the_same_lines() -> None:
    for path in sorted((FIXTURES / "vllm-cpu" / "logs").iterdir()):
        data = path.read_bytes()
        assert _scan(data, True) == _scan(data, False), path.name


@pytest.mark.parametrize("use_hyperscan", ENGINES)
def test_binary_junk_and_a_line_without_end(use_hyperscan: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scanner, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(scanner, "CHUNK_BYTES", 1024)
    junk = bytes(range(256)) * 64  # 16 KiB, no newline until the end
    data = junk + b"\nOSError: [Errno 98] Address already in use\n\xff\xfe"
    totals = ScanTotals()
    hits = list(LineScanner(PATTERNS, use_hyperscan=use_hyperscan).scan(io.BytesIO(data), totals))
    assert any(b"Errno 98" in h.line for h in hits)
    assert totals.bytes == len(data)


def test_empty_stream() -> None:
    totals = ScanTotals()
    assert list(LineScanner(PATTERNS).scan(io.BytesIO(b""), totals)) == []
    assert totals.lines == 0 and totals.bytes == 0


@pytest.mark.parametrize("use_hyperscan", ENGINES)
def test_a_pattern_never_reaches_into_the_next_line(use_hyperscan: bool) -> None:
    # `[^\[]+` and `\s+` match newlines in a block; the scanner keeps each match on its own line, as the exact
    # regex later re-run on that one line would.
    scanner = LineScanner([r"Value error, (?P<message>[^\[]+)$", r"took:\s+\d"], use_hyperscan=use_hyperscan)
    block = b"  Value error, Invalid repository ID\nPlease verify [x]\nit took:\n 5 s\n"
    hits = [(h.line_no, h.line) for h in scanner.scan(io.BytesIO(block), ScanTotals())]
    assert hits == [(1, b"  Value error, Invalid repository ID")]
