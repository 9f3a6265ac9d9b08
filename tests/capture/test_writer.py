"""The bundle writer: redacts before writing, keeps to the size cap, scrubs late-learned secrets, renames at the end."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from llmtriage.capture.manifest import Manifest
from llmtriage.capture.writer import BundleWriter, bundle_path
from llmtriage.redact import Redactor


def writer(tmp_path: Path, max_total_bytes: int = 1 << 20) -> BundleWriter:
    return BundleWriter(tmp_path / "b", Redactor(), max_total_bytes)


def test_nothing_at_the_final_path_until_finish(tmp_path: Path) -> None:
    w = writer(tmp_path)
    w.write("logs/server.log", "line\n")
    w.write_manifest(Manifest(tool_version="0", host="h", started_at="t", label="b", plan={}))
    assert not (tmp_path / "b").exists() and w.temp.is_dir()
    final = w.finish()
    assert final == tmp_path / "b" and not w.temp.exists()
    assert (final / "logs" / "server.log").read_text() == "line\n"
    assert json.loads((final / "manifest.json").read_text())["schema_version"] == 1
    assert stat.S_IMODE(final.stat().st_mode) == 0o700
    assert stat.S_IMODE((final / "logs" / "server.log").stat().st_mode) == 0o600


def test_text_is_redacted_before_it_is_written(tmp_path: Path) -> None:
    w = writer(tmp_path)
    w.write("config/launch.txt", "vllm serve m --api-key key-0123456789\n")
    assert b"key-0123456789" not in (w.temp / "config" / "launch.txt").read_bytes()


def test_secrets_learned_later_are_scrubbed_from_earlier_files(tmp_path: Path) -> None:
    w = writer(tmp_path)
    w.write("metrics/scrape-1795961000000.prom", "# a scrape that echoes opaque-secret-42 by chance\n")
    w.redactor.redact_env({"MODEL_SERVER_TOKEN": "opaque-secret-42"})  # learned from its name afterwards
    assert w.scrub_again() == 1
    text = (w.temp / "metrics" / "scrape-1795961000000.prom").read_text()
    assert "opaque-secret-42" not in text and "<redacted:secret_env_var:1>" in text
    assert w.total_bytes == len(text.encode())
    assert w.scrub_again() == 0


def test_size_cap(tmp_path: Path) -> None:
    w = writer(tmp_path, max_total_bytes=20)
    first = w.write("logs/a.log", "0123456789\nabcdefghij\nmore\n")
    assert first is not None and first.truncated and first.bytes == 11
    assert w.write("logs/b.log", "x" * 30) is None and w.cap_reached


@pytest.mark.parametrize("rel", ["../escape.txt", "/etc/passwd", ""])
def test_paths_stay_inside_the_bundle(tmp_path: Path, rel: str) -> None:
    with pytest.raises(ValueError, match="not a bundle path"):
        writer(tmp_path).write(rel, "x")


def test_bundle_path_never_reuses_a_name(tmp_path: Path) -> None:
    (tmp_path / "cap-1").mkdir()
    (tmp_path / ".cap-1-2.partial-99").mkdir()
    assert bundle_path(tmp_path, "cap-1") == tmp_path / "cap-1-3"
