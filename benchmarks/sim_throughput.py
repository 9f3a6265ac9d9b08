"""How many concurrent streams and streamed tokens/s `llmtriage sim` sustains, against a named baseline.

Baseline: a bare aiohttp server that streams the same SSE chunks with no engine behind it (the transport's
ceiling on this machine), measured in the same run with the same client. Both servers run in their own
process; the client (one process, aiohttp) opens --streams concurrent streaming completions of --tokens each.
Targets (issue 4): >= 1,000 concurrent streams and >= 50,000 streamed tokens/s on 2 cores at a high --speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from llmtriage.lab.process import free_port

ROOT = Path(__file__).resolve().parent.parent

BARE_SERVER = r"""
import asyncio, json, sys
from aiohttp import web
async def complete(request):
    body = await request.json()
    n = int(body["max_tokens"])
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    head = '{"id":"cmpl-x","object":"text_completion","created":0,"model":"m"'
    for i in range(n):
        reason = '"length"' if i == n - 1 else "null"
        await resp.write(f'data: {head},"choices":[{{"index":0,"text":" tok","logprobs":null,"finish_reason":{reason},"stop_reason":null}}]}}\n\n'.encode())
        if i % 8 == 7:
            await asyncio.sleep(0)
    await resp.write(b"data: [DONE]\n\n")
    return resp
app = web.Application()
app.router.add_post("/v1/completions", complete)
app.router.add_get("/health", lambda r: web.Response())
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


async def wait_ready(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not become ready")


async def one_stream(session: aiohttp.ClientSession, url: str, tokens: int, peak: list[int], live: list[int]) -> int:
    payload = {"prompt": "benchmark " * 16, "max_tokens": tokens, "stream": True, "ignore_eos": True}
    received = 0
    async with session.post(url + "/v1/completions", json=payload) as resp:
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        async for line in resp.content:
            if line.startswith(b"data: {"):
                received += 1
        live[0] -= 1
    return received


async def drive(url: str, streams: int, tokens: int) -> tuple[float, int, int]:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        peak, live = [0], [0]
        start = time.perf_counter()
        counts = await asyncio.gather(*(one_stream(session, url, tokens, peak, live) for _ in range(streams)))
        elapsed = time.perf_counter() - start
    return elapsed, sum(counts), peak[0]


def run_against(cmd: list[str], port: int, streams: int, tokens: int) -> tuple[float, int, int]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        url = f"http://127.0.0.1:{port}"
        asyncio.run(wait_ready(url))
        return asyncio.run(drive(url, streams, tokens))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=200, help="tokens per stream")
    parser.add_argument("--speed", type=float, default=1000.0)
    args = parser.parse_args()
    sim_port, bare_port = free_port(), free_port()
    print(
        f"input: {args.streams} streams x {args.tokens} tokens, one aiohttp client; baseline: a bare aiohttp SSE "
        f"server; both servers at nice {os.nice(0)}"
    )
    sim_cmd = [
        sys.executable, "-m", "llmtriage", "sim", "--port", str(sim_port), "--speed", str(args.speed), "--quiet",
        "--startup-seconds", "0", "--max-num-seqs", str(args.streams), "--max-num-batched-tokens", "65536",
        "--max-model-len", "4096",
    ]  # fmt: skip
    sim_s, sim_tokens, sim_peak = run_against(sim_cmd, sim_port, args.streams, args.tokens)
    bare_s, bare_tokens, bare_peak = run_against(
        [sys.executable, "-c", BARE_SERVER, str(bare_port)], bare_port, args.streams, args.tokens
    )
    sim_rate, bare_rate = sim_tokens / sim_s, bare_tokens / bare_s
    result = {
        "cores": os.cpu_count(),
        "streams_requested": args.streams,
        "sim": {
            "concurrent_streams_peak": sim_peak,
            "tokens": sim_tokens,
            "seconds": round(sim_s, 2),
            "tokens_per_s": round(sim_rate),
        },
        "baseline_bare_aiohttp": {
            "concurrent_streams_peak": bare_peak,
            "tokens": bare_tokens,
            "seconds": round(bare_s, 2),
            "tokens_per_s": round(bare_rate),
        },
        "ratio_sim_over_baseline": round(sim_rate / bare_rate, 2),
    }
    print(json.dumps(result, indent=2))
    print(
        f"sim: {sim_peak} concurrent streams, {sim_rate:,.0f} tokens/s; bare aiohttp baseline: {bare_rate:,.0f} tokens/s; "
        f"ratio {sim_rate / bare_rate:.2f} (targets: >= 1000 streams, >= 50,000 tokens/s)"
    )
    return 0 if sim_tokens == args.streams * args.tokens else 1


if __name__ == "__main__":
    sys.exit(main())
