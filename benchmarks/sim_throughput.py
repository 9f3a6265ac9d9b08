"""Streamed tokens/s of `llmtriage sim` at thousands of concurrent streams, against bare aiohttp servers; the errors.

Baseline: a bare aiohttp server on uvloop (as the sim) streaming SSE chunks of the sim's shape with no engine behind
it, one write per token; for reference also the same server writing 8 tokens at a time (the sim, behind its clock,
writes all of a stream's pending tokens at once). Every server listens with the same backlog and open-files limit, in
its own process; one client (this process, aiohttp on uvloop) opens --streams concurrent streaming completions of
--tokens each against each server in turn, --repeats times; medians printed. Client and servers run at this process's
CPU priority. Each failed stream is counted by cause (a connection reset, a refused connect, a server disconnect, a
timeout, an HTTP error, a stream cut short), and the kernel's listen-queue overflows during each run are shown
(machine-wide: another process's count too). CPU per token is read from /proc (Linux).
Targets: at 4,000 streams, no failed sim stream and the sim >= 0.8 x the one-write-per-token baseline's tokens/s
(issue 20); >= 1,000 streams and >= 50,000 tokens/s on 2 cores (issue 4). Exits 0 when all are met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from llmtriage import aio
from llmtriage.lab.process import free_port
from llmtriage.sim.server import LISTEN_BACKLOG  # the baselines listen as the sim does

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 0.8
TARGET_STREAMS = 4000

SIM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # the sim's default; the baseline names it too, for equal chunk sizes
# argv: port, listen backlog, tokens per write, model name. Yields to the loop every 8 tokens either way.
BARE_SERVER = r"""
import asyncio, json, resource, sys, time, uuid
from aiohttp import web
try:
    import uvloop
    loop = uvloop.new_event_loop()
except ImportError:
    loop = asyncio.new_event_loop()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
except (ValueError, OSError):
    pass
per_write = int(sys.argv[3])
async def complete(request):
    body = await request.json()
    n = int(body["max_tokens"])
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    head = json.dumps({"id": "cmpl-" + uuid.uuid4().hex[:16], "object": "text_completion", "created": int(time.time()),
                       "model": sys.argv[4]}, separators=(",", ":"))[:-1]
    parts = []
    for i in range(n):
        reason = '"length"' if i == n - 1 else "null"
        parts.append(f'data: {head},"choices":[{{"index":0,"text":" tok","logprobs":null,"finish_reason":{reason},"stop_reason":null}}]}}\n\n'.encode())
        if len(parts) == per_write:
            await resp.write(b"".join(parts))
            parts = []
        if i % 8 == 7:
            await asyncio.sleep(0)
    await resp.write(b"".join(parts) + b"data: [DONE]\n\n")
    return resp
app = web.Application()
app.router.add_post("/v1/completions", complete)
app.router.add_get("/health", lambda r: web.Response())
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None, backlog=int(sys.argv[2]), loop=loop)
"""


@dataclass
class Run:
    """One server driven once."""

    seconds: float
    tokens: int
    peak_streams: int
    errors: Counter[str]
    server_cpu_s: float
    client_cpu_s: float
    listen_overflows: int | None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


@dataclass
class Live:
    """Streams open now and at most."""

    now: int = 0
    peak: int = 0
    errors: Counter[str] = field(default_factory=Counter)


def raise_open_files_limit() -> None:
    """Soft open-files limit up to the hard one: each stream is a socket on each side."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):  # an unlimited hard limit: the soft one stays
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def listen_overflows() -> int | None:
    """The kernel's TcpExt ListenOverflows (connections dropped because an accept queue was full), or None."""
    try:
        header, values = (line.split() for line in Path("/proc/net/netstat").read_text().splitlines()[:2])
    except (OSError, ValueError):
        return None
    counters = dict(zip(header, values, strict=False))
    return int(counters["ListenOverflows"]) if "ListenOverflows" in counters else None


def somaxconn() -> int | None:
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return None


def error_kind(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connect failed"
    if isinstance(exc, aiohttp.ClientOSError) and exc.errno == errno.ECONNRESET:
        return "connection reset"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server disconnected"
    if isinstance(exc, TimeoutError):
        return "timeout"
    return type(exc).__name__


async def one_stream(session: aiohttp.ClientSession, url: str, tokens: int, live: Live) -> int:
    payload = {"prompt": "benchmark " * 16, "max_tokens": tokens, "stream": True, "ignore_eos": True}
    received = 0
    done = False
    try:
        async with session.post(url + "/v1/completions", json=payload) as resp:
            if resp.status != 200:
                live.errors[f"HTTP {resp.status}"] += 1
                return 0
            live.now += 1
            live.peak = max(live.peak, live.now)
            try:
                async for line in resp.content:
                    if line.startswith(b"data: {"):
                        received += 1
                    elif line.startswith(b"data: [DONE]"):
                        done = True
            finally:
                live.now -= 1
    except (aiohttp.ClientError, TimeoutError) as e:
        live.errors[error_kind(e)] += 1
        return received
    if received != tokens or not done:
        live.errors["stream cut short"] += 1
    return received


async def drive(url: str, streams: int, tokens: int, timeout_s: float) -> tuple[float, int, int, Counter[str]]:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    live = Live()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()
        counts = await asyncio.gather(*(one_stream(session, url, tokens, live) for _ in range(streams)))
        elapsed = time.perf_counter() - start
    return elapsed, sum(counts), live.peak, live.errors


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


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc), or NaN."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_against(cmd: list[str], port: int, streams: int, tokens: int, timeout_s: float) -> Run:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        url = f"http://127.0.0.1:{port}"
        aio.run(wait_ready(url))
        overflows_before = listen_overflows()
        server_before = process_cpu_s(proc.pid)
        client_before = resource.getrusage(resource.RUSAGE_SELF)
        seconds, received, peak, errors = aio.run(drive(url, streams, tokens, timeout_s))
        client_after = resource.getrusage(resource.RUSAGE_SELF)
        server_after = process_cpu_s(proc.pid)
        overflows_after = listen_overflows()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return Run(
        seconds=seconds,
        tokens=received,
        peak_streams=peak,
        errors=errors,
        server_cpu_s=server_after - server_before,
        client_cpu_s=client_after.ru_utime + client_after.ru_stime - client_before.ru_utime - client_before.ru_stime,
        listen_overflows=(
            overflows_after - overflows_before if overflows_before is not None and overflows_after is not None else None
        ),
    )


def summary(name: str, runs: list[Run]) -> str:
    rate = statistics.median(r.tokens_per_s for r in runs)
    seconds = statistics.median(r.seconds for r in runs)
    peak = min(r.peak_streams for r in runs)
    server_us = statistics.median(1e6 * r.server_cpu_s / max(1, r.tokens) for r in runs)
    client_us = statistics.median(1e6 * r.client_cpu_s / max(1, r.tokens) for r in runs)
    errors: Counter[str] = sum((r.errors for r in runs), Counter())
    overflow_counts = [r.listen_overflows for r in runs if r.listen_overflows is not None]
    overflows = str(sum(overflow_counts)) if overflow_counts else "n/a"
    said = ", ".join(f"{n} {kind}" for kind, n in errors.most_common()) or "none"
    return (
        f"{name:<28}{seconds:>7.2f}{rate:>10,.0f}{peak:>8}{server_us:>8.1f}{client_us:>8.1f}{overflows:>10}  "
        f"errors: {said}"
    )


def ratios(ours: list[Run], theirs: list[Run]) -> tuple[float, str]:
    """The median of the tokens/s ratios of the runs made side by side (one per repeat), and those ratios."""
    each = [a.tokens_per_s / b.tokens_per_s for a, b in zip(ours, theirs, strict=True)]
    return statistics.median(each), "median of " + ", ".join(f"{r:.2f}" for r in each)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=TARGET_STREAMS)
    parser.add_argument("--tokens", type=int, default=200, help="tokens per stream")
    parser.add_argument("--speed", type=float, default=1000.0, help="the sim's --speed")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each server, alternating")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="the client's limit on one whole run")
    args = parser.parse_args()
    raise_open_files_limit()
    open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    cap = somaxconn()
    backlog = min(LISTEN_BACKLOG, cap) if cap is not None else LISTEN_BACKLOG
    print(
        f"input: {args.streams:,} concurrent streaming completions x {args.tokens} tokens (ignore_eos), from one aiohttp "
        f"client on uvloop; the sim at --speed {args.speed:g} (its engine behind its clock: CPU-bound)"
    )
    print(
        "baseline: a bare aiohttp server on uvloop streaming SSE chunks of the same shape with no engine, one write per "
        "token (and, for reference, one write per 8 tokens)"
    )
    print(
        f"all at nice {os.nice(0)}, listen backlog {backlog} (net.core.somaxconn {cap if cap is not None else 'unknown'}), "
        f"open files {open_files}; {args.repeats} repeats alternating, medians; {os.cpu_count()} cores, shared"
    )
    if cap is not None and cap < args.streams:
        print(
            f"note: net.core.somaxconn {cap} < {args.streams} streams: a burst of connects can overflow accept queues"
        )
    servers: dict[str, tuple[list[str], int]] = {}
    for name, per_write in (("bare aiohttp, 1 token/write", 1), ("bare aiohttp, 8 tokens/write", 8)):
        port = free_port()
        servers[name] = (
            [sys.executable, "-c", BARE_SERVER, str(port), str(LISTEN_BACKLOG), str(per_write), SIM_MODEL],
            port,
        )
    sim_port = free_port()
    servers["llmtriage sim"] = (
        [
            sys.executable, "-m", "llmtriage", "sim", "--port", str(sim_port), "--speed", str(args.speed), "--quiet",
            "--model", SIM_MODEL, "--startup-seconds", "0", "--max-num-seqs", str(args.streams),
            "--max-num-batched-tokens", "65536", "--max-model-len", "4096",
        ],
        sim_port,
    )  # fmt: skip
    runs: dict[str, list[Run]] = {name: [] for name in servers}
    for _ in range(args.repeats):
        for name, (cmd, port) in servers.items():
            runs[name].append(run_against(cmd, port, args.streams, args.tokens, args.timeout_s))
    print(f"{'':<28}{'':>7}{'':>10}{'peak':>8}{'server':>8}{'client':>8}{'listen':>10}")
    print(f"{'server':<28}{'s':>7}{'tokens/s':>10}{'streams':>8}{'us/tok':>8}{'us/tok':>8}{'overflows':>10}")
    for name, server_runs in runs.items():
        print(summary(name, server_runs))
    sim, bare = runs["llmtriage sim"], runs["bare aiohttp, 1 token/write"]
    target, target_each = ratios(sim, bare)
    print(
        f"ratio sim/bare aiohttp (1 token/write) tokens/s at {args.streams:,} streams: {target:.2f} ({target_each})  "
        f"(target >= {TARGET_RATIO:.2f} at {TARGET_STREAMS:,})"
    )
    reference, reference_each = ratios(sim, runs["bare aiohttp, 8 tokens/write"])
    print(
        f"ratio sim/bare aiohttp (8 tokens/write) tokens/s: {reference:.2f} ({reference_each})  "
        "(no target: behind its clock the sim writes all of a stream's pending tokens at once)"
    )
    cpu_us = {
        name: statistics.median(1e6 * (r.server_cpu_s + r.client_cpu_s) / max(1, r.tokens) for r in server_runs)
        for name, server_runs in runs.items()
    }
    print(
        f"CPU per token, server + client: sim {cpu_us['llmtriage sim']:.1f} us, bare aiohttp (1 token/write) "
        f"{cpu_us['bare aiohttp, 1 token/write']:.1f} us: the sim streams "
        f"{cpu_us['bare aiohttp, 1 token/write'] / cpu_us['llmtriage sim']:.2f}x its tokens per CPU second "
        "(what a neighbour's load on the cores moves least)"
    )
    failed = {name: sum(sum(r.errors.values()) for r in server_runs) for name, server_runs in runs.items()}
    print(
        "failed streams: "
        + ", ".join(f"{name} {n}" for name, n in failed.items())
        + f" (of {args.streams * args.repeats:,} each; target: 0 for the sim)"
    )
    peak = min(r.peak_streams for r in sim)
    sim_rate = statistics.median(r.tokens_per_s for r in sim)
    print(
        f"sim: {peak:,} concurrent streams, {sim_rate:,.0f} tokens/s  (targets: >= 1,000 streams, >= 50,000 tokens/s)"
    )
    met = target >= TARGET_RATIO and failed["llmtriage sim"] == 0 and peak >= 1000 and sim_rate >= 50_000
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
