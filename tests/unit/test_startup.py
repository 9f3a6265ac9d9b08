"""Start-up: commands import only what they run, catalogs parse with libyaml or come from the cache, and the cache
(parsed catalogs, the Hyperscan database) is never trusted when damaged or out of reach."""

from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import typer.main
import yaml
from typer.testing import CliRunner

from llmtriage import catalog, usercache
from llmtriage.errors import ExitCode
from llmtriage.parse import scanner
from llmtriage.parse.scanner import LineScanner, ScanTotals

from ..conftest import FIXTURES

# The module, not the `app` the package re-exports under the same name.
app_module = importlib.import_module("llmtriage.cli.app")
CATALOG_FILES = sorted(
    str(path.relative_to(Path(str(resources.files(catalog)))))
    for pattern in ("*.yaml", "signatures/*.yaml")
    for path in Path(str(resources.files(catalog))).glob(pattern)
)


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMTRIAGE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("name", CATALOG_FILES)
def test_a_catalog_reads_the_same_parsed_by_libyaml_and_from_the_cache(name: str, cache_dir: Path) -> None:
    text = resources.files(catalog).joinpath(name).read_text(encoding="utf-8")
    reference = yaml.load(text, Loader=yaml.SafeLoader)  # the pure-Python parser
    parsed = catalog.load_yaml(name)
    assert len(list(cache_dir.iterdir())) == 1
    assert parsed == reference
    assert catalog.load_yaml(name) == reference


def test_a_damaged_or_unwritable_cache_is_ignored(cache_dir: Path) -> None:
    reference = catalog.load_yaml("engines.yaml")
    (entry,) = cache_dir.iterdir()
    data = bytearray(entry.read_bytes())
    data[-1] ^= 0xFF
    entry.write_bytes(bytes(data))
    assert usercache.read(entry.name) is None
    assert catalog.load_yaml("engines.yaml") == reference
    assert usercache.read(entry.name) is not None  # parsed again and rewritten

    entry.unlink()
    cache_dir.rmdir()
    cache_dir.write_text("a file where the cache directory should be")
    assert catalog.load_yaml("engines.yaml") == reference
    assert usercache.read(entry.name) is None


def test_an_empty_cache_setting_turns_the_cache_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMTRIAGE_CACHE_DIR", "")
    assert usercache.cache_dir() is None
    assert catalog.load_yaml("engines.yaml")["engines"]


@pytest.mark.skipif(scanner.hyperscan is None, reason="Hyperscan is not installed")
def test_the_stored_hyperscan_database_finds_what_a_fresh_one_finds(cache_dir: Path) -> None:
    patterns = [s.pattern for s in catalog.signatures()]
    data = b"".join(path.read_bytes() for path in sorted((FIXTURES / "vllm-cpu" / "logs").iterdir()))

    def scan() -> list[tuple[int, frozenset[int]]]:
        hits = LineScanner(patterns, use_hyperscan=True).scan(io.BytesIO(data), ScanTotals())
        return [(h.line_no, h.pattern_ids) for h in hits]

    compiled = scan()
    (entry,) = (p for p in cache_dir.iterdir() if p.name.startswith("hyperscan-"))
    assert scan() == compiled  # loaded from the entry
    entry.write_bytes(entry.read_bytes()[:100])
    assert scan() == compiled  # a truncated entry: compiled again
    assert compiled


def test_the_command_table_names_what_the_modules_register(cache_dir: Path) -> None:
    listed = app_module.command_summaries()  # an empty cache: from the modules
    registered = typer.main.get_group(app_module.app).commands
    assert sorted(registered) == sorted(app_module.COMMANDS) == sorted(listed)
    assert app_module.command_summaries() == listed  # from the cache
    assert listed["fit"] == registered["fit"].help


def test_the_help_listing_is_the_same_from_the_cache(cache_dir: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(app_module.app, ["--help"], terminal_width=120)
    assert any(p.name.startswith("cli-summaries-") for p in cache_dir.iterdir())
    again = runner.invoke(app_module.app, ["--help"], terminal_width=120)
    assert first.exit_code == again.exit_code == 0
    assert first.output == again.output
    assert all(name in first.output for name in app_module.COMMANDS)


def _modules_after(argv: list[str], cache: Path) -> set[str]:
    code = (
        "import json, sys\n"
        f"sys.argv = {['llmtriage', *argv]!r}\n"
        "from llmtriage.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(json.dumps(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "LLMTRIAGE_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False, env=env
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_help_and_fit_import_no_other_command(tmp_path: Path) -> None:
    _modules_after(["--help"], tmp_path)  # the first listing reads the summaries from the modules
    help_modules = _modules_after(["--help"], tmp_path)
    assert not {m for m in help_modules if m.startswith("llmtriage.cli.") and m != "llmtriage.cli.app"}
    fit_argv = ["fit", "--model", "Qwen/Qwen3-8B", "--gpu", "H100 80GB"]
    assert "yaml" in _modules_after(fit_argv, tmp_path)  # the first fit parses the catalogs it reads
    fit_modules = _modules_after(fit_argv, tmp_path)
    assert "llmtriage.cli.fit" in fit_modules
    assert not {"aiohttp", "llmtriage.cli.bench", "llmtriage.capture", "llmtriage.diagnose.engine"} & fit_modules
    # What made `fit` slow to start: rich's tables, pydantic (typer 0.29), YAML parsing, the triage catalogs' and
    # the typed facts' classes, OpenSSL's hashes.
    slow = {"rich", "pydantic", "yaml", "llmtriage.catalog.triage", "llmtriage.facts", "_hashlib"}
    assert not slow & fit_modules


def test_the_entry_point_freezes_start_up_and_runs_the_command_with_the_collector_on() -> None:
    code = (
        "import gc, json, sys\n"
        "import llmtriage.cli\n"
        "seen = {}\n"
        "def command():\n"
        "    seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count(), fit='llmtriage.cli.fit' in sys.modules)\n"
        "llmtriage.cli.main = command\n"
        "sys.argv = ['llmtriage', 'fit', '--model', 'Qwen/Qwen3-8B']\n"
        "from llmtriage.entry import main\n"
        "main()\n"
        "print(json.dumps(seen))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(done.stdout)
    assert seen["enabled"] is True
    assert seen["frozen"] > 10_000  # typer's and the command's modules, imported before the command runs
    assert seen["fit"] is True


def test_a_command_whose_module_fails_to_import_fails_inside_the_error_handling(tmp_path: Path) -> None:
    code = (
        "import importlib, sys\n"
        "app = importlib.import_module('llmtriage.cli.app')  # the package's `app` is the typer app\n"
        "def broken(module):\n"
        "    raise RuntimeError('a broken install')\n"
        "app.load_commands = broken\n"
        "sys.argv = ['llmtriage', 'fit', '--model', 'Qwen/Qwen3-8B']\n"
        "from llmtriage.entry import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == int(ExitCode.INTERNAL)
    assert "internal error: RuntimeError: a broken install" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_changed_file_gets_a_new_cache_entry(tmp_path: Path) -> None:
    data = tmp_path / "data.yaml"
    data.write_text("a: 1\n")
    first = usercache.file_key("catalog", [data], "data.yaml")
    assert usercache.file_key("catalog", [data], "data.yaml") == first
    stat = data.stat()
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert usercache.file_key("catalog", [data], "data.yaml") != first
    assert usercache.file_key("catalog", [data], "other.yaml") != usercache.file_key("catalog", [data], "data.yaml")


def test_the_catalogs_are_reached_through_the_package() -> None:
    from llmtriage.catalog import GpuInfo, Signature

    assert all(isinstance(s, Signature) for s in catalog.signatures())
    assert all(isinstance(g, GpuInfo) for g in catalog.gpus())
    with pytest.raises(AttributeError, match="no attribute 'no_such_catalog'"):
        _ = catalog.no_such_catalog


def test_the_redactors_database_is_stored_once_and_found_by_the_next_process(tmp_path: Path) -> None:
    pytest.importorskip("hyperscan")
    code = "from llmtriage.redact import Redactor\nRedactor().redact_text('export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123')\n"
    env = {**os.environ, "LLMTRIAGE_CACHE_DIR": str(tmp_path)}  # a fresh hash seed per process, as for users
    entries = []
    for _ in range(3):
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)
        entries.append(sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("redact-hints-")))
    assert entries[0] and entries[0] == entries[1] == entries[2]
