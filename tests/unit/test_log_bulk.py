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


def test_a_secret_in_a_requested_path_is_redacted() -> None:
    facts = _read(_serving_log(), redact=True)
    paths = [path for _, path, _ in facts.http_status]
    assert "/v1/models?api_key=sk-abcdefghijklmnopqrstuvwxyz0123" not in paths
    assert any(path.startswith("/v1/models?api_key=<redacted:") for path in paths)
    assert "sk-abcdefghijklmnopqrstuvwxyz0123" not in repr(facts)
