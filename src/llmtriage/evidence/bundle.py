"""Read an incident bundle (or loose files) from disk into :class:`~llmtriage.facts.Evidence`.

The layout is the bundle's (``logs/``, ``gpu/``, ``kernel/``, ``metrics/``, ``config/``, ``bench/``);
a directory filled by hand works the same without ``manifest.json``. Every file that cannot be read
becomes a problem on the evidence, never an exception; logs are streamed, other files are capped.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from llmtriage.bench import result as bench_result
from llmtriage.facts import (
    Citation,
    Evidence,
    GpuFacts,
    KernelFacts,
    LogFacts,
    MetricsFacts,
    Problem,
)
from llmtriage.parse import collect_env, dmesg, launch, logs, model_config, nvidia_smi, pasted, prom
from llmtriage.redact import Redactor

MAX_TEXT_BYTES = 64 << 20
ORIGIN_NAMES = 4
"""Loose files named in the evidence's origin (the header of every report); more are counted."""
_EPOCH_IN_NAME = re.compile(r"(?<!\d)(\d{10}|\d{13})(?:\.\d+)?(?!\d)")


@dataclass(slots=True)
class LooseFiles:
    """Evidence given file by file on the command line."""

    logs: list[Path] = field(default_factory=list)
    log_texts: list[tuple[str, bytes]] = field(default_factory=list)
    """Logs given as bytes, named: what ``--log -`` read from standard input."""
    nvidia_smi: list[Path] = field(default_factory=list)
    dmesg: list[Path] = field(default_factory=list)
    metrics: list[Path] = field(default_factory=list)
    metrics_texts: list[tuple[str, str, float | None]] = field(default_factory=list)
    launch: str | None = None
    model_config: Path | None = None
    collect_env: Path | None = None

    def names(self) -> list[str]:
        """What was given, as the command line named it (a file's path, ``stdin``, ``--launch``)."""
        paths = [*self.logs, *self.nvidia_smi, *self.dmesg, *self.metrics, self.model_config, self.collect_env]
        named = [str(p) for p in paths if p is not None]
        named[len(self.logs) : len(self.logs)] = [name for name, _ in self.log_texts]
        named.extend(name for name, _, _ in self.metrics_texts)
        return named + (["--launch"] if self.launch is not None else [])


def read_capped(path: Path, name: str, problems: list[Problem]) -> str | None:
    """The text of ``path`` up to MAX_TEXT_BYTES; why not, or that it was cut, goes into ``problems`` as ``name``.
    Regular files only: a FIFO or a device (/dev/zero) would never end."""
    if not path.is_file():
        problems.append(Problem(name, "not a regular file (a FIFO or device is never read)"))
        return None
    try:
        with path.open("rb") as f:
            data = f.read(MAX_TEXT_BYTES + 1)
    except OSError as e:
        problems.append(Problem(name, f"cannot read: {e.strerror or e}"))
        return None
    if len(data) > MAX_TEXT_BYTES:
        problems.append(Problem(name, f"larger than {MAX_TEXT_BYTES >> 20} MiB; only the start was read"))
        data = data[:MAX_TEXT_BYTES]
    return data.decode("utf-8", "replace")


# How much of a log is looked at to tell text from binary, and the share of that which may be non-text.
SNIFF_BYTES = 64 << 10
BINARY_SHARE = 0.1
_TEXT_CONTROLS = frozenset(b"\t\n\r\x1b\x0c")


@dataclass(slots=True)
class OpenedLog:
    """A log's bytes as UTF-8-compatible text (gzip inflated, UTF-16 re-encoded), or why it is not a text log."""

    stream: BinaryIO
    unreadable: str | None = None

    def __enter__(self) -> OpenedLog:
        return self

    def __exit__(self, *_: object) -> None:
        self.stream.close()


def open_log(path: Path) -> OpenedLog:
    """Open ``path`` as a log: regular files only; empty, binary or undecodable ones say why."""
    if not path.is_file():
        return OpenedLog(io.BytesIO(), "not a regular file (a FIFO or device is never read)")
    return open_log_stream(path.open("rb"))


def open_log_stream(raw: BinaryIO) -> OpenedLog:
    """Open a seekable stream (a file, or what standard input gave) as a log, as :func:`open_log` does."""
    head = raw.read(SNIFF_BYTES)
    if head[:2] == b"\x1f\x8b":
        raw.seek(0)
        raw = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
        head = raw.read(SNIFF_BYTES)
    raw.seek(0)
    if not head.strip():
        return OpenedLog(raw, "empty: no log lines")
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") or _utf16_without_bom(head):
        data = raw.read(MAX_TEXT_BYTES)
        raw.close()
        encoding = "utf-16" if head[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-16-le"
        utf8 = data.decode(encoding, "replace").encode("utf-8")
        return OpenedLog(_unpasted(io.BytesIO(utf8), utf8[:SNIFF_BYTES]))
    if _looks_binary(head):
        return OpenedLog(raw, "binary data, not a text log (give the log as text, gzip or UTF-16)")
    return OpenedLog(_unpasted(raw, head))


def _unpasted(stream: BinaryIO, head: bytes) -> BinaryIO:
    """A log pasted from an issue or a chat as the log it quotes (parse.pasted); any other log as it is, streamed.
    The head tells: a paste shows its fences, quoting or wrapping from its first lines."""
    if not pasted.unpaste(head.decode("utf-8", "replace")).removed:
        return stream
    data = stream.read(MAX_TEXT_BYTES)
    stream.close()
    return io.BytesIO(pasted.unpaste(data.decode("utf-8", "replace")).text.encode("utf-8"))


def _utf16_without_bom(head: bytes) -> bool:
    """Little-endian UTF-16 ASCII text: every other byte is NUL."""
    sample = head[:512]
    return len(sample) >= 8 and sample[1::2].count(0) >= 0.9 * len(sample[1::2]) and sample[0::2].count(0) == 0


def _looks_binary(head: bytes) -> bool:
    text = head.decode("utf-8", "replace")
    odd = sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ord(ch) not in _TEXT_CONTROLS))
    return odd > BINARY_SHARE * max(len(text), 1)


class _Reader:
    def __init__(self, root: Path | None, evidence: Evidence) -> None:
        self.root = root
        self._resolved_root = root.resolve() if root is not None else None
        self.evidence = evidence
        # Whatever a bundle holds is redacted as it is read: a bundle made by someone else is shown, stored and
        # rendered without the secrets it carries.
        self.redactor = Redactor()
        # One reader for every scrape: it parses each series once and redacts it then (values are numbers).
        self.scrapes = prom.ScrapeReader(self.redactor.redact_text)

    def name(self, path: Path) -> str:
        if self.root is not None:
            try:
                return path.relative_to(self.root).as_posix()
            except ValueError:
                pass
        return str(path)

    def inside(self, path: Path) -> bool:
        """``path`` resolves inside the bundle; a link that leads out is named as a problem and never followed."""
        if self._resolved_root is None or path.resolve().is_relative_to(self._resolved_root):
            return True
        self.evidence.problems.append(
            Problem(self.name(path), "a link out of the bundle: not followed (it could expose this machine)")
        )
        return False

    def text(self, path: Path) -> str | None:
        text = read_capped(path, self.name(path), self.evidence.problems)
        return None if text is None else self.redactor.redact_text(text)

    def log(self, path: Path) -> None:
        self.log_from(self.name(path), lambda: open_log(path))

    def log_from(self, name: str, opener: Callable[[], OpenedLog]) -> None:
        facts = self.evidence.logs or LogFacts()
        try:
            with opener() as opened:
                if opened.unreadable is not None:
                    self.evidence.problems.append(Problem(name, opened.unreadable))
                    return
                logs.read_log(opened.stream, name, facts, self.redactor.redact_text)
        except (OSError, EOFError, zlib.error) as e:
            self.evidence.problems.append(Problem(name, f"cannot read: {getattr(e, 'strerror', None) or e}"))
            return
        self.evidence.logs = facts
        self.evidence.read.append(name)

    def gpu_text(self, path: Path) -> None:
        text = self.text(path)
        if text is None:
            return
        name = self.name(path)
        gpu = self.evidence.gpu or GpuFacts()
        self.evidence.gpu = gpu
        gpu.sources.append(name)
        self.evidence.read.append(name)
        errors = LogFacts()
        logs.read_log(io.BytesIO(text.encode("utf-8")), name, errors, self.redactor.redact_text)
        gpu.errors.extend(e for e in errors.events if e.role == "error")
        if "NVSMI LOG" in text or re.search(r"Clocks (?:Throttle|Event) Reasons", text):
            query = nvidia_smi.parse_query(text, name)
            gpu.driver_version = gpu.driver_version or query.driver_version
            gpu.cuda_version = gpu.cuda_version or query.cuda_version
            gpu.active_reasons.update(query.active_reasons())
            if query.gpus:
                first_line = min((min(g.lines.values()) for g in query.gpus if g.lines), default=None)
                gpu.reasons_citation = Citation(source=name, line=first_line, excerpt="clocks event reasons")
            gpu.snapshot.extend(s for s in nvidia_smi.query_samples(query, name) if s.memory_total_mib is not None)
            gpu.problems.extend(query.problems)
            return
        table = nvidia_smi.parse_table(text, name)
        gpu.driver_version = gpu.driver_version or table.driver_version
        gpu.cuda_version = gpu.cuda_version or table.cuda_version
        gpu.snapshot.extend(table.gpus)
        if table.processes_seen:
            gpu.processes.extend(table.processes)
            gpu.processes_citation = Citation(source=name, excerpt="Processes")
        if not gpu.errors:
            gpu.problems.extend(table.problems)

    def gpu_csv(self, path: Path) -> None:
        text = self.text(path)
        if text is None:
            return
        name = self.name(path)
        gpu = self.evidence.gpu or GpuFacts()
        self.evidence.gpu = gpu
        parsed = nvidia_smi.parse_csv(text, name)
        gpu.sources.append(name)
        gpu.samples.extend(parsed.samples)
        if parsed.processes:
            gpu.processes.extend(parsed.processes)
        gpu.problems.extend(parsed.problems)
        self.evidence.read.append(name)

    def kernel(self, path: Path) -> None:
        text = self.text(path)
        if text is None:
            return
        name = self.name(path)
        parsed = dmesg.parse_dmesg(text, name)
        facts = self.evidence.kernel or KernelFacts()
        facts.sources.extend(parsed.sources)
        facts.events.extend(parsed.events)
        facts.problems.extend(parsed.problems)
        self.evidence.kernel = facts
        self.evidence.read.append(name)

    def metrics(self, path: Path, timestamp_s: float | None) -> None:
        text = read_capped(path, self.name(path), self.evidence.problems)
        if text is None:
            return
        self.metrics_text(self.name(path), text, timestamp_s)

    def metrics_text(self, name: str, text: str, timestamp_s: float | None) -> None:
        """A scrape (not yet redacted: the reader and the log parser redact what they keep)."""
        snapshot, problems = self.scrapes.read(text, name, timestamp_s)
        facts = self.evidence.metrics or MetricsFacts()
        self.evidence.metrics = facts
        if snapshot.sample_count == 0:
            facts.problems.append(Problem(name, "not Prometheus text; read as a log instead"))
            log_facts = self.evidence.logs or LogFacts()
            logs.read_log(io.BytesIO(text.encode("utf-8")), name, log_facts, self.redactor.redact_text)
            self.evidence.logs = log_facts
            self.evidence.read.append(name)
            return
        facts.problems.extend(problems)
        facts.snapshots.append(snapshot)
        self.evidence.read.append(name)

    def launch_text(self, name: str, text: str) -> None:
        self.evidence.launch = launch.parse_launch(self.redactor.redact_text(text), name)
        self.evidence.read.append(name)

    def env_text(self, name: str, text: str) -> None:
        config = self.evidence.launch or launch.parse_launch("", name)
        launch.apply_env(config, text, name)
        self.evidence.launch = config
        self.evidence.read.append(name)

    def model(self, path: Path) -> None:
        text = self.text(path)
        if text is None:
            return
        config, problems = model_config.parse_model_config(text, self.name(path))
        self.evidence.problems.extend(problems)
        if config is not None:
            self.evidence.model = config
            self.evidence.read.append(self.name(path))

    def stack(self, path: Path) -> None:
        """A snapshot of the software stack (environment.json or collect_env text); the first read wins per field."""
        text = self.text(path)
        if text is None:
            return
        name = self.name(path)
        found = collect_env.parse_snapshot(text, name)
        self.evidence.problems.extend(found.problems)
        if not found.known():
            return
        if self.evidence.stack is None:
            self.evidence.stack = found
        else:
            self.evidence.stack.fill(found)
        self.evidence.read.append(name)

    def bench(self, path: Path) -> None:
        """A ``llmtriage bench`` result.json: the load test's figures, each cited."""
        text = self.text(path)
        if text is None:
            return
        figures, problems = bench_result.bench_figures(text, self.name(path))
        self.evidence.problems.extend(problems)
        if figures is not None:
            self.evidence.bench = figures
            self.evidence.read.append(self.name(path))


def _scrape_time(path: Path) -> float | None:
    m = _EPOCH_IN_NAME.search(path.name)
    if m is not None:
        value = float(m.group(1))
        return value / 1000.0 if len(m.group(1)) == 13 else value
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _files(reader: _Reader, directory: Path, patterns: tuple[str, ...]) -> list[Path]:
    """The regular files of a bundle folder that stay inside the bundle."""
    found: set[Path] = set()
    for pattern in patterns:
        found.update(p for p in directory.glob(pattern) if reader.inside(p) and p.is_file())
    return sorted(found)


def read_evidence(root: Path | None = None, loose: LooseFiles | None = None) -> Evidence:
    """Read a bundle directory and/or loose files into one piece of evidence."""
    named = [] if loose is None else loose.names()
    shown = ", ".join(named[:ORIGIN_NAMES]) + (
        f" and {len(named) - ORIGIN_NAMES} more" if len(named) > ORIGIN_NAMES else ""
    )
    evidence = Evidence(origin=str(root) if root is not None else shown or "nothing given")
    reader = _Reader(root, evidence)
    if root is not None:
        _read_bundle(reader, root)
    if loose is not None:
        _read_loose(reader, loose)
    _fold_log_hints(evidence)
    return evidence


def _read_bundle(reader: _Reader, root: Path) -> None:
    for path in _files(reader, root / "logs", ("*",)):
        reader.log(path)
    for path in _files(reader, root / "gpu", ("*.txt",)):
        reader.gpu_text(path)
    for path in _files(reader, root / "gpu", ("*.csv",)):
        reader.gpu_csv(path)
    for path in _files(reader, root / "kernel", ("*",)):
        reader.kernel(path)
    metrics = _files(reader, root / "metrics", ("*.prom", "*.txt"))
    for timestamp_s, path in sorted(((_scrape_time(p), p) for p in metrics), key=lambda t: (t[0] or 0.0, t[1].name)):
        reader.metrics(path, timestamp_s)
    for name, read in (("config/launch.txt", reader.launch_text), ("config/env.txt", reader.env_text)):
        if _bundle_file(reader, root / name) and (text := reader.text(root / name)) is not None:
            read(name, text)
    if _bundle_file(reader, config_file := root / "config" / "config.json"):
        reader.model(config_file)
    for name in ("config/environment.json", "config/collect_env.txt"):
        if _bundle_file(reader, root / name):
            reader.stack(root / name)
    if _bundle_file(reader, bench_file := root / "bench" / "result.json"):
        reader.bench(bench_file)
    if _bundle_file(reader, manifest := root / "manifest.json"):
        _read_manifest(reader, manifest)


def _bundle_file(reader: _Reader, path: Path) -> bool:
    """A file of the bundle's layout that is there and stays inside the bundle."""
    return (path.exists() or path.is_symlink()) and reader.inside(path) and path.is_file()


def _read_loose(reader: _Reader, files: LooseFiles) -> None:
    for path in files.logs:
        reader.log(path)
    for name, data in files.log_texts:
        reader.log_from(name, functools.partial(open_log_stream, io.BytesIO(data)))
    for path in files.nvidia_smi:
        if path.suffix == ".csv":
            reader.gpu_csv(path)
        else:
            reader.gpu_text(path)
    for path in files.dmesg:
        reader.kernel(path)
    for path in files.metrics:
        reader.metrics(path, _scrape_time(path))
    for name, text, timestamp_s in files.metrics_texts:
        reader.metrics_text(name, text, timestamp_s)
    if files.launch is not None:
        reader.launch_text("--launch", files.launch)
    if files.model_config is not None:
        reader.model(files.model_config)
    if files.collect_env is not None:
        reader.stack(files.collect_env)


def _read_manifest(reader: _Reader, path: Path) -> None:
    text = reader.text(path)
    if text is None:
        return
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as e:
        reader.evidence.problems.append(Problem("manifest.json", f"not JSON: {e.msg}"))
        return
    if isinstance(manifest, dict) and manifest.get("partial"):
        why = manifest.get("interrupted_by") or "the capture did not finish"
        reader.evidence.problems.append(Problem("manifest.json", f"a partial bundle: {why}; some sources may be cut"))
    for source in manifest.get("sources", []) if isinstance(manifest, dict) else []:
        if isinstance(source, dict) and source.get("status") == "failed":
            reader.evidence.problems.append(
                Problem(str(source.get("name", "?")), f"capture failed: {source.get('reason', 'unknown reason')}")
            )


def _fold_log_hints(evidence: Evidence) -> None:
    """Launch arguments the server printed fill what the launch command did not say."""
    facts = evidence.logs
    if facts is None or not facts.launch_hints:
        return
    if evidence.launch is None:
        evidence.launch = launch.parse_launch("", "server log")
    launch.fold_log_hints(evidence.launch, facts)
