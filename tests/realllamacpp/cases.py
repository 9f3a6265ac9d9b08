"""The llama-server faults, as launch flags and loads: shared by the live tests and
scripts/record_llamacpp_cpu.py, which recorded tests/fixtures/llamacpp-cpu from them."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

# -c 256 with one slot: a 400-character prompt (~400 tokens with the tiny vocabulary) does not fit.
CTX_OVERFLOW_ARGS = ("-c", "256", "--parallel", "1")
# One slot, 24 long generations at once: 23 wait (llamacpp:requests_deferred). Each waiting stream holds an HTTP
# thread: the default pool (--parallel + 4 threads) would leave /metrics unanswered behind them.
QUEUE_ARGS = ("-c", "4096", "--parallel", "1", "--threads-http", "32")
QUEUE_REQUESTS = 24
# A shared KV cache of 256 cells for 4 slots: 4 requests of ~100 + 150 tokens cannot all fit.
KV_UNIFIED_ARGS = ("-c", "256", "--parallel", "4", "--kv-unified")
KV_UNIFIED_REQUESTS = 4


def prompt(index: int, chars: int) -> str:
    """A distinct prompt of about ``chars`` tokens (one token a character in the tiny vocabulary): distinct, so
    llama-server's prompt cache cannot shorten the prefill."""
    return f"{index:04d}" + "a" * max(0, chars - 4)


def completion(index: int, chars: int, max_tokens: int, stream: bool = True) -> dict[str, object]:
    """A completion request that always runs to ``max_tokens``."""
    return {"prompt": prompt(index, chars), "max_tokens": max_tokens, "stream": stream, "ignore_eos": True}


def post(url: str, body: dict[str, object]) -> tuple[int, str]:
    """POST /v1/completions; the status and the body."""
    req = urllib.request.Request(
        url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def get(url: str, path: str) -> str:
    """GET a path of the server; its body."""
    with urllib.request.urlopen(url + path, timeout=10) as r:
        return str(r.read().decode())


def scrape(url: str) -> tuple[str, float]:
    """One /metrics scrape and when it was taken."""
    return get(url, "/metrics"), time.time()


def deferred(text: str) -> float:
    """llamacpp:requests_deferred in a scrape."""
    line = next(line for line in text.splitlines() if line.startswith("llamacpp:requests_deferred "))
    return float(line.split()[1])
