"""Hostile /metrics answers and Prometheus APIs (issue: no leak, no crash, no hang): HTML or junk where a scrape
belongs, a truncated line, a server that trickles its answer or never ends it, a malformed URL, JSON nested past
the parser's recursion, and a scrape of a million series. Each test reproduces one defect a probe found, and
fails without its fix. Servers run on 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web

from llmtriage import catalog
from llmtriage.evidence import live
from llmtriage.parse import prom
from llmtriage.watch import http as watch_http

from ..conftest import FIXTURES
from .conftest import llmtriage

SCRAPE = (FIXTURES / "vllm-cpu" / "metrics" / "kv-pressure-at-peak-waiting.txt").read_text()
WAITING = 29.0  # vllm:num_requests_waiting in SCRAPE
WIDE = {"COLUMNS": "400"}  # one error, one line

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextmanager
def serving(routes: dict[str, Handler]) -> Iterator[str]:
    """An aiohttp server on 127.0.0.1, run in a thread, answering ``routes``; yields its base URL."""
    loop = asyncio.new_event_loop()
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    host, port = runner.addresses[0][:2]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.run_until_complete(runner.cleanup())
        loop.close()


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="OK")


def _clear(proc: object) -> None:
    """No traceback and no internal error in what the command printed."""
    stderr = getattr(proc, "stderr", "")
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr


def _in_thread(work: Callable[[], object], limit_s: float) -> object:
    """``work()``'s result or exception, failing the test when it has not ended within ``limit_s``."""
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(_catch(work)), daemon=True)
    thread.start()
    thread.join(limit_s)
    assert outcome, f"still reading after {limit_s:g} s"
    return outcome[0]


def _catch(work: Callable[[], object]) -> object:
    try:
        return work()
    except Exception as e:  # handed to the test to assert on
        return e


# ---------------------------------------------------------------- 1: not Prometheus text at a live URL


@pytest.mark.parametrize(
    ("body", "content_type", "said"),
    [
        ("<!DOCTYPE html>\n<html><body>Welcome to nginx!</body></html>\n", "text/html", "Welcome to nginx"),
        ('{"detail": "Not Found"}', "application/json", "detail"),
        ("", "text/plain", "an empty body"),
        ("Service is starting, please wait.\n404 page not found\n", "text/plain", "Service is starting"),
    ],
    ids=["html", "json", "empty", "prose"],
)
def test_a_metrics_url_answering_no_samples_could_not_be_read(body: str, content_type: str, said: str) -> None:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=body, content_type=content_type)

    with serving({"/metrics": metrics, "/health": _ok}) as base:
        proc = llmtriage("diagnose", "--metrics", base + "/metrics", "--no-runbook", env=WIDE, timeout=60)
        _clear(proc)
        assert proc.returncode == 4, proc.stdout + proc.stderr
        assert "could not be read" in proc.stderr and content_type in proc.stderr and said in proc.stderr


# ---------------------------------------------------------------- 2: one bad line costs that line


def _without_comments(text: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith("#"))


def test_one_truncated_line_costs_only_that_line() -> None:
    lines = _without_comments(SCRAPE).splitlines()
    cut = next(i for i, line in enumerate(lines) if line.startswith("vllm:num_requests_running{"))
    lines[cut] = lines[cut][:25]  # vllm:num_requests_running{engi
    snap, problems = prom.parse_metrics("\n".join(lines) + "\n", "cut.prom")
    assert snap.engine == "vllm" and "running" not in snap.gauges
    assert snap.gauges["waiting"] == WAITING and snap.histograms["ttft_seconds"].count == 5
    assert snap.sample_count == len(lines) - 1
    assert [p.message for p in problems] == ["1 malformed sample line skipped"]


def test_malformed_lines_inside_a_family_cost_only_themselves() -> None:
    bucket = next(line for line in SCRAPE.splitlines() if line.startswith("vllm:time_to_first_token_seconds_bucket"))
    broken = SCRAPE.replace(bucket, bucket + "\n" + bucket.replace("}", "", 1) + '\n<html>\nvllm:x{a="b"} 1_000')
    snap, problems = prom.parse_metrics(broken, "broken.prom")
    assert snap.histograms["ttft_seconds"].count == 5 and snap.gauges["waiting"] == WAITING
    assert [p.message for p in problems] == ["3 malformed sample lines skipped"]


def test_diagnose_reads_a_scrape_with_a_truncated_line(tmp_path: Path) -> None:
    lines = _without_comments(SCRAPE).splitlines()
    scrape = tmp_path / "scrape.prom"
    scrape.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:12])  # cut mid-line, as a dropped connection does
    proc = llmtriage("diagnose", "--metrics", str(scrape), "--no-runbook", "--format", "json", timeout=60)
    _clear(proc)
    result = json.loads(proc.stdout)
    assert result["symptom_class"] == "slow_ttft", result["problems"]
    assert any("1 malformed sample line skipped" in p for p in result["problems"])


def test_too_many_samples_of_catalog_series_are_counted_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prom, "MAX_KEPT_SAMPLES", 10)
    text = "".join(f'vllm:num_requests_running{{model_name="m{i}"}} 1\n' for i in range(25))
    snap, problems = prom.parse_metrics(text, "many.prom")
    assert snap.gauges["running"] == 10 and snap.sample_count == 25
    assert [p.message for p in problems] == [
        "15 samples of catalog series beyond the first 10 skipped (a cardinality explosion?)"
    ]


# ---------------------------------------------------------------- 3: a total deadline and a size cap


async def _trickle(request: web.Request) -> web.StreamResponse:
    """The scrape, one line every 0.5 s (330 s in all)."""
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    for line in SCRAPE.splitlines():
        await response.write(line.encode() + b"\n")
        await asyncio.sleep(0.5)
    return response


async def _endless(request: web.Request) -> web.StreamResponse:
    """The scrape, then junk series as fast as they are read, never ending."""
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    await response.write(SCRAPE.encode())
    i = 0
    while True:
        await response.write("".join(f'junk_total{{i="{i + k}"}} {k}\n' for k in range(2000)).encode())
        i += 2000


def test_diagnose_of_a_trickling_metrics_url_ends_at_the_deadline() -> None:
    with serving({"/metrics": _trickle, "/health": _ok}) as base:
        started = time.monotonic()
        proc = llmtriage("diagnose", "--metrics", base + "/metrics", "--no-runbook", env=WIDE, timeout=60)
        elapsed = time.monotonic() - started
        _clear(proc)
        assert proc.returncode == 4, proc.stderr
        assert f"no whole answer within {live.SCRAPE_TIMEOUT_S:g} s" in proc.stderr
        assert elapsed < live.SCRAPE_TIMEOUT_S + 15


def test_capture_of_a_trickling_metrics_url_keeps_its_duration(tmp_path: Path) -> None:
    # Each sample's GET has one deadline: a trickling answer cannot stretch a 2 s capture to minutes.
    with serving({"/metrics": _trickle, "/health": _ok}) as base:
        started = time.monotonic()
        proc = llmtriage(
            "capture", "--metrics-url", base + "/metrics", "--duration", "2s", "--interval", "1s",
            "--out", str(tmp_path), "--no-diagnose", env=WIDE, timeout=120,
        )  # fmt: skip
        elapsed = time.monotonic() - started
        _clear(proc)
        assert proc.returncode == 0, proc.stderr
        assert elapsed < 2 + 2 * live.SCRAPE_TIMEOUT_S, elapsed
        assert [p for p in tmp_path.iterdir() if p.is_dir()], "the bundle is written"


def test_a_server_trickling_its_headers_is_cut_at_the_deadline() -> None:
    async def headers_forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for _ in range(1000):
            writer.write(b"X")
            await writer.drain()
            await asyncio.sleep(0.2)

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(headers_forever, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        error = _in_thread(lambda: live.scrape(f"http://127.0.0.1:{port}/metrics", timeout_s=1.0), limit_s=10)
        assert isinstance(error, live.FetchError), error
        assert "no whole answer within 1 s" in error.message and time.monotonic() - started < 5
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


def test_a_scrape_that_never_ends_is_cut_at_the_cap() -> None:
    with serving({"/metrics": _endless}) as base:
        url = base + "/metrics"
        scrape = _in_thread(lambda: live.scrape(url, timeout_s=10, max_bytes=1 << 20), limit_s=20)
        assert isinstance(scrape, live.Scrape), scrape
        assert scrape.truncated and len(scrape.text) <= 1 << 20 and scrape.text.endswith("\n")
        snap, problems = prom.parse_metrics(scrape.text, url)
        assert snap.gauges["waiting"] == WAITING and problems == []


def test_diagnose_says_a_scrape_was_cut_at_the_cap() -> None:
    with serving({"/metrics": _endless, "/health": _ok}) as base:
        proc = llmtriage("diagnose", "--metrics", base + "/metrics", "--no-runbook", "--format", "json")
        _clear(proc)
        result = json.loads(proc.stdout)
        assert result["symptom_class"] == "slow_ttft"
        cap = live.MAX_SCRAPE_BYTES >> 20
        assert any(f"larger than {cap} MiB; only the start was read" in p for p in result["problems"])


def test_redirects_are_followed_within_the_deadline_and_a_loop_ends() -> None:
    # starlette answers /metrics with a 307 to /metrics/ when prometheus_client's app is mounted there
    async def moved(_: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect("/metrics/")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=SCRAPE, content_type="text/plain")

    async def loop(_: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    with serving({"/metrics": moved, "/metrics/": metrics, "/loop": loop}) as base:
        assert live.scrape(base + "/metrics").text == SCRAPE
        with pytest.raises(live.FetchError, match="more than 5 redirects"):
            live.scrape(base + "/loop")


def test_watch_reads_a_scrape_that_arrives_in_pieces() -> None:
    async def in_two(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        half = len(SCRAPE) // 2
        await response.write(SCRAPE[:half].encode())
        await asyncio.sleep(0.3)
        await response.write(SCRAPE[half:].encode())
        return response

    async def get(url: str) -> watch_http.Answer:
        async with watch_http.session(1) as session:
            return await watch_http.get(session, url, 5.0)

    with serving({"/metrics": in_two}) as base:
        answer = asyncio.run(get(base + "/metrics"))
        assert answer.ok and answer.body == SCRAPE.encode()


def test_watch_gives_up_on_a_trickling_scrape_at_its_timeout() -> None:
    async def get(url: str) -> tuple[watch_http.Answer, float]:
        started = time.monotonic()
        async with watch_http.session(1) as session:
            return await watch_http.get(session, url, 1.0), time.monotonic() - started

    with serving({"/metrics": _trickle}) as base:
        answer, elapsed = asyncio.run(get(base + "/metrics"))
        assert answer.error == "no answer within 1 s" and elapsed < 3


# ---------------------------------------------------------------- 4: malformed URLs, deeply nested JSON


@pytest.mark.parametrize(
    "args",
    [
        ("diagnose", "--metrics", "http://[::1"),
        ("diagnose", "--metrics", "http://127.0.0.1:99999/metrics"),
        ("diagnose", "--metrics", "http://127.0.0.1:port/metrics"),
        ("diagnose", "--metrics", "http:///metrics"),
        ("watch", "--metrics-url", "http://[::1", "--duration", "2s"),
        ("watch", "--metrics-url", "http://127.0.0.1:80000/metrics", "--duration", "2s"),
        ("watch", "--metrics-url", "http://127.0.0.1:1/metrics", "--gpu", "http://[::1", "--duration", "2s"),
        ("diagnose", "--prometheus", "http://[::1"),
    ],
    ids=lambda a: " ".join(a[:3]),
)
def test_a_malformed_url_is_a_usage_error(args: tuple[str, ...]) -> None:
    proc = llmtriage(*args, env=WIDE, timeout=60)
    _clear(proc)
    assert proc.returncode == 2, proc.stderr
    assert "hint: e.g." in proc.stderr


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"status": "success", "data": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"status": "success", "data": {"resultType": "matrix", "result": [1, 2]}}', "unknown shape"),
        ('{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": [], "values": 3}]}}', "shape"),
    ],
    ids=["nested-list", "nested-data", "result-of-numbers", "labels-a-list"],
)
def test_a_prometheus_answering_hostile_json_is_unavailable(body: str, said: str) -> None:
    async def api(_: web.Request) -> web.Response:
        return web.Response(text=body, content_type="application/json")

    with serving({"/api/v1/query_range": api, "/api/v1/query": api}) as base:
        proc = llmtriage("diagnose", "--prometheus", base, env=WIDE, timeout=60)
        _clear(proc)
        assert proc.returncode == 4, proc.stderr
        assert said in proc.stderr


# ---------------------------------------------------------------- 5: big scrapes in bounded memory


def test_a_200k_series_scrape_is_parsed_in_bounded_memory() -> None:
    series = 200_000
    junk = "".join(f'exporter_junk_total{{route="/item/{i}",shard="{i % 97}"}} {i}\n' for i in range(series))
    text = SCRAPE + junk  # ~11 MB
    catalog.metric_map()  # loaded once per process: not the parse's memory
    tracemalloc.start()
    try:
        snap, problems = prom.parse_metrics(text, "big.prom")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # materialising the samples, as prometheus_client's families do, takes ~100 MB here
    assert peak < 4 << 20, f"peak {peak / 2**20:.1f} MiB"
    assert problems == [] and snap.engine == "vllm"
    assert snap.gauges["waiting"] == WAITING and snap.histograms["ttft_seconds"].count == 5
    assert snap.sample_count == series + sum(1 for ln in SCRAPE.splitlines() if ln and not ln.startswith("#"))
