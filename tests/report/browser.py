"""Load a page in Debian's headless ``chromium`` over the DevTools protocol (aiohttp's websocket client) and report
what a person's browser would do with it: console errors, uncaught exceptions, network requests, the DOM's
text and elements, and a screenshot.

Chromium runs with ``--no-sandbox`` (tests run as root) and without background networking, component updates
or sync, so it opens no connection of its own; every request the page makes is recorded.
"""

from __future__ import annotations

import asyncio
import base64
import json
import queue
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = shutil.which("chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
_LISTENING = re.compile(r"DevTools listening on (ws://127\.0\.0\.1:\d+/\S+)")
START_TIMEOUT_S = 30.0
STEP_TIMEOUT_S = 30.0
VIEWPORT = (1100, 900)

# What the page's DOM says: evaluated in the page after it loaded.
DOM_PROBE = """JSON.stringify({
  title: document.title,
  text: document.body ? document.body.innerText : "",
  scripts: document.scripts.length,
  images: document.images.length,
  iframes: document.querySelectorAll("iframe, object, embed, link[rel=stylesheet], link[href]").length,
  event_handlers: Array.from(document.querySelectorAll("*")).filter(
      e => Array.from(e.attributes).some(a => a.name.startsWith("on"))).length,
  sections: Array.from(document.querySelectorAll("section")).map(s => s.id),
  charts: document.querySelectorAll("svg.chart").length,
  tags: Array.from(new Set(Array.from(document.querySelectorAll("*")).map(e => e.tagName.toLowerCase()))),
  height: document.documentElement.scrollHeight,
})"""


# How the page lays out (after render): what a person sees on the first screen, whether anything is wider than the
# screen, and what the charts and evidence lists hold as drawn.
LAYOUT_PROBE = """JSON.stringify((() => {
  const box = sel => { const e = document.querySelector(sel); if (!e) return null;
    const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom}; };
  const vertices = d => (d.match(/[ML]/g) || []).length;
  const charts = Array.from(document.querySelectorAll("svg.chart")).map(svg => {
    const solid = Array.from(svg.querySelectorAll("path.line")).filter(p => !p.hasAttribute("stroke-dasharray"));
    const drawn = solid.length ? Math.max(...solid.map(p => vertices(p.getAttribute("d"))))
                               : svg.querySelectorAll("circle").length;
    return {label: svg.getAttribute("aria-label"), points: drawn, cdf: svg.dataset.kind === "cdf",
            x0: svg.dataset.x0 || null, x1: svg.dataset.x1 || null,
            ticks: Array.from(svg.querySelectorAll("text.xt")).map(t => t.textContent),
            events: Array.from(svg.querySelectorAll("text.et")).map(t => t.textContent)};
  });
  const lists = Array.from(document.querySelectorAll(".cause ul.ev, ol.path > li")).map(list =>
    Array.from(list.querySelectorAll(":scope > li, :scope > .why")).map(li => li.innerText.trim()));
  const body = getComputedStyle(document.body).color;
  const dimmed = Array.from(document.querySelectorAll(".cause ul.ev li, ol.path .why, .note")).filter(e => {
    const s = getComputedStyle(e); return s.color !== body || parseFloat(s.opacity) < 1; }).length;
  return {width: window.innerWidth, height: window.innerHeight, scroll_width: document.documentElement.scrollWidth,
          verdict: box("#verdict .cls"), first_fix: box("#verdict .fix1"), cause: box("#verdict strong"),
          charts: charts, evidence_lists: lists, dimmed: dimmed,
          sparse: Array.from(document.querySelectorAll("p.sparse")).map(p => p.innerText)};
})())"""


@dataclass
class PageReport:
    """What loading one page did (``console_errors``: console and log entries at error or warning level)."""

    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dom: dict[str, Any] = field(default_factory=dict)
    layout: dict[str, Any] = field(default_factory=dict)
    screenshot_png: bytes = b""


class _Session:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.waiters: list[tuple[str, asyncio.Future[dict[str, Any]]]] = []

    async def pump(self) -> None:
        async for message in self.ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(message.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)
                for method, future in list(self.waiters):
                    if method == data["method"] and not future.done():
                        future.set_result(data)

    async def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        self.next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = future
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        await self.ws.send_str(json.dumps(message))
        answer = await asyncio.wait_for(future, STEP_TIMEOUT_S)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def expect(self, method: str) -> asyncio.Future[dict[str, Any]]:
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiters.append((method, future))
        return future


async def _load(ws_url: str, url: str, viewport: tuple[int, int]) -> PageReport:
    report = PageReport()
    async with aiohttp.ClientSession() as http, http.ws_connect(ws_url, max_msg_size=0) as ws:
        cdp = _Session(ws)
        pump = asyncio.create_task(cdp.pump())
        try:
            target = (await cdp.call("Target.createTarget", {"url": "about:blank"}))["targetId"]
            session = (await cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                await cdp.call(f"{domain}.enable", session=session)
            width, height = viewport
            metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}
            await cdp.call("Emulation.setDeviceMetricsOverride", metrics, session=session)
            loaded = cdp.expect("Page.loadEventFired")
            await cdp.call("Page.navigate", {"url": url}, session=session)
            await asyncio.wait_for(loaded, STEP_TIMEOUT_S)
            probe = await cdp.call(
                "Runtime.evaluate", {"expression": DOM_PROBE, "returnByValue": True}, session=session
            )
            report.dom = json.loads(probe["result"]["value"])
            layout = await cdp.call(
                "Runtime.evaluate", {"expression": LAYOUT_PROBE, "returnByValue": True}, session=session
            )
            report.layout = json.loads(layout["result"]["value"])
            shot = await cdp.call(
                "Page.captureScreenshot",
                {"format": "png", "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 0.5}},
                session=session,
            )
            report.screenshot_png = base64.b64decode(shot["data"])
            await cdp.call("Browser.close")  # the browser and its child processes exit, done with the profile
        finally:
            pump.cancel()
    for event in cdp.events:
        method, params = event["method"], event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
            report.console_errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            report.exceptions.append(details.get("exception", {}).get("description") or details.get("text", "?"))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
            report.console_errors.append(params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            report.requests.append(params["request"]["url"])
    return report


def load_page(path: Path, viewport: tuple[int, int] = VIEWPORT) -> PageReport:
    """Open ``path`` in a fresh headless chromium with a screen of ``viewport`` (width, height) CSS pixels and
    report what happened; requests other than the page's own."""
    if CHROMIUM is None:
        raise RuntimeError("chromium is not installed (make dev installs it: scripts/ensure-debian-packages.sh)")
    url = path.resolve().as_uri()
    # A child process that outlives a failed run may still write to the profile: cleanup errors don't count.
    with tempfile.TemporaryDirectory(prefix="llmtriage-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            ws_url = _devtools_url(proc)
            report = asyncio.run(_load(ws_url, url, viewport))
        finally:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
    report.requests = [r for r in report.requests if r != url]
    return report


def _devtools_url(proc: subprocess.Popen[str]) -> str:
    """The browser's websocket URL from its stderr, which a thread keeps draining so chromium never blocks on it."""
    found: queue.Queue[str] = queue.Queue()
    seen: list[str] = []

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            m = _LISTENING.search(line)
            if m is not None:
                found.put(m.group(1))

    threading.Thread(target=drain, daemon=True).start()
    try:
        return found.get(timeout=START_TIMEOUT_S)
    except queue.Empty:
        raise RuntimeError("chromium did not start: " + "".join(seen[-10:])) from None


# ---------------------------------------------------------------- PNG pixels


def png_pixels(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """Width, height, bytes per pixel and the unfiltered rows of an 8-bit, non-interlaced PNG (gray, RGB, RGBA)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, bytearray()
    width = height = bpp = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0, (depth, interlace)
            bpp = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(bytes(idat))
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = prev[i]
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 255
            elif kind == 4:
                corner = prev[i - bpp] if i >= bpp else 0
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def luminance_variance(data: bytes) -> float:
    """Variance of the pixels' luminance (0-255) of a PNG: 0 for a blank page."""
    width, _, bpp, rows = png_pixels(data)
    values = []
    for row in rows:
        for x in range(width):
            px = row[x * bpp : x * bpp + bpp]
            values.append(px[0] if bpp < 3 else 0.299 * px[0] + 0.587 * px[1] + 0.114 * px[2])
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / len(values)
