"""`fit --online` against a Hugging Face Hub served on 127.0.0.1 (HF_ENDPOINT): config.json and safetensors headers
are read through the real huggingface_hub client, and no weight byte is downloaded."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from tests.capacity.test_model_sources import QWEN_AWQ_CONFIG

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TENSOR_BYTES = 3_000_000


def _safetensors(tensors: dict[str, int]) -> bytes:
    """A safetensors file: the header, then (zeroed) tensor data of the given byte sizes."""
    header, offset = {}, 0
    for name, size in tensors.items():
        header[name] = {"dtype": "I32", "shape": [size // 4], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


class _Hub(BaseHTTPRequestHandler):
    files: ClassVar[dict[str, bytes]] = {}
    served_bytes: ClassVar[list[int]] = []

    def log_message(self, *_: object) -> None:
        pass

    def _file(self) -> bytes | None:
        match = re.fullmatch(r"/acme/Tiny-AWQ/resolve/[^/]+/(.+)", self.path.split("?")[0])
        return self.files.get(match.group(1)) if match else None

    def _headers(self, body: bytes, status: int, length: int) -> None:
        self.send_response(status)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{abs(hash(body)):x}"')
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def do_HEAD(self) -> None:
        body = self._file()
        if body is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._headers(body, 200, len(body))

    def do_GET(self) -> None:
        body = self._file()
        if body is None:
            self.do_HEAD()
            return
        ranged = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if ranged:
            body = body[int(ranged.group(1)) : int(ranged.group(2)) + 1]
        self._headers(body, 206 if ranged else 200, len(body))
        self.wfile.write(body)
        self.served_bytes.append(len(body))


@pytest.fixture
def hub() -> Iterator[str]:
    _Hub.files = {
        "config.json": json.dumps(QWEN_AWQ_CONFIG).encode(),
        "model.safetensors": _safetensors({"model.embed_tokens.weight": TENSOR_BYTES, "lm_head.weight": 1000}),
    }
    _Hub.served_bytes = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _fit(endpoint: str, cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
    }
    return subprocess.run(
        [sys.executable, "-m", "llmtriage", "fit", "--model", "acme/Tiny-AWQ", "--gpu", "L4", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_online_reads_the_config_and_the_safetensors_headers_only(hub: str, tmp_path: Path) -> None:
    done = _fit(hub, tmp_path / "hub", "--online", "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    assert data["weights_source"] == "safetensors headers"
    assert data["weights_gib"] == round((TENSOR_BYTES + 1000) / 2**30, 2)
    assert data["quantization"].startswith("awq 4-bit")
    assert "Hugging Face Hub" in data["model_note"]
    # the header was read by range; the tensors' bytes never crossed the wire
    assert sum(_Hub.served_bytes) < TENSOR_BYTES / 10, _Hub.served_bytes
    # the config is now in the cache: the next run resolves it offline, from the cache
    again = _fit("http://127.0.0.1:9", tmp_path / "hub", "--format", "json")
    assert "local Hugging Face cache" in json.loads(again.stdout)["model_note"]


def test_online_to_a_hub_that_does_not_answer_is_one_clear_error(tmp_path: Path) -> None:
    done = _fit("http://127.0.0.1:9", tmp_path / "hub", "--online")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "acme/Tiny-AWQ" in done.stderr and "config.json" in done.stderr
