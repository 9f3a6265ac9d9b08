"""Hugging Face checkpoints: the local hub cache (no network), and the Hub itself with ``--online``.

The cache is the one ``huggingface_hub`` writes: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
``~/.cache/huggingface/hub``; a repository ``org/name`` lives in ``models--org--name/snapshots/<revision>/``
and ``refs/main`` names the revision. Online, only config.json and the safetensors headers are read (the Hub
serves the headers by range request); no weights are downloaded.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from llmtriage.errors import UsageError

_INDEX = "model.safetensors.index.json"
_INDEX_LIMIT_BYTES = 64 * 2**20
_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A repository's files as the cache holds them."""

    repo_id: str
    directory: Path


def cache_dir() -> Path:
    """Where ``huggingface_hub`` keeps its cache on this machine."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def _repo_dir(root: Path, repo_id: str) -> Path | None:
    wanted = "models--" + repo_id.replace("/", "--")
    exact = root / wanted
    if exact.is_dir():
        return exact
    try:
        return next((p for p in root.iterdir() if p.name.lower() == wanted.lower() and p.is_dir()), None)
    except OSError:
        return None


def cached_snapshot(repo_id: str) -> Snapshot | None:
    """The cached snapshot of ``repo_id`` holding a config.json: ``refs/main``'s, else the newest; None if none."""
    if repo_id.count("/") != 1:
        return None
    repo = _repo_dir(cache_dir(), repo_id)
    if repo is None:
        return None
    snapshots = repo / "snapshots"
    try:
        main = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        main = ""
    if main and (snapshots / main / "config.json").is_file():
        return Snapshot(repo_id, snapshots / main)
    try:
        candidates = [p for p in snapshots.iterdir() if (p / "config.json").is_file()]
    except OSError:
        return None
    if not candidates:
        return None
    return Snapshot(repo_id, max(candidates, key=lambda p: (p / "config.json").stat().st_mtime))


def index_bytes(directory: Path) -> int | None:
    """``metadata.total_size`` of the safetensors index in ``directory`` (every tensor's bytes), if readable."""
    path = directory / _INDEX
    try:
        if not path.is_file() or path.stat().st_size > _INDEX_LIMIT_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    total = data.get("metadata", {}).get("total_size") if isinstance(data, dict) else None
    if isinstance(total, int) and not isinstance(total, bool) and total > 0:
        return total
    return None


@dataclass(frozen=True, slots=True)
class HubCheckpoint:
    """What the Hub says of a repository: its config.json on disk, and its tensors' bytes if it has safetensors."""

    config_path: Path
    weights_bytes: int | None


def fetch(repo_id: str) -> HubCheckpoint:
    """config.json and the safetensors byte count of ``repo_id`` from the Hub (no weights downloaded)."""
    try:
        import huggingface_hub
    except ImportError as e:
        raise UsageError(f"--model {repo_id!r}: huggingface_hub is not installed", "pip install huggingface_hub") from e
    try:
        # One HEAD without retries first: hf_hub_download retries an unreachable Hub for ~25 s before failing.
        huggingface_hub.get_hf_file_metadata(huggingface_hub.hf_hub_url(repo_id, "config.json"), timeout=_TIMEOUT_S)
        config = Path(huggingface_hub.hf_hub_download(repo_id, "config.json", etag_timeout=_TIMEOUT_S))
    except huggingface_hub.errors.GatedRepoError as e:
        raise UsageError(
            f"--model {repo_id!r}: the repository is gated", "accept its licence on huggingface.co and set HF_TOKEN"
        ) from e
    except huggingface_hub.errors.RepositoryNotFoundError as e:
        raise UsageError(f"--model {repo_id!r}: no such repository on the Hugging Face Hub") from e
    except huggingface_hub.errors.LocalEntryNotFoundError as e:  # the Hub unreachable, nothing cached
        raise UsageError(
            f"--model {repo_id!r}: could not reach the Hugging Face Hub for its config.json",
            "check the network (HF_ENDPOINT, proxies), or give a local config.json",
        ) from e
    except huggingface_hub.errors.EntryNotFoundError as e:
        raise UsageError(f"--model {repo_id!r}: the repository has no config.json") from e
    except Exception as e:  # offline, a proxy, a timeout: the Hub's HTTP client has its own kinds
        raise UsageError(
            f"--model {repo_id!r}: could not read its config.json from the Hub ({type(e).__name__})",
            "check the network (HF_ENDPOINT, proxies), or give a local config.json",
        ) from e
    try:
        metadata = huggingface_hub.get_safetensors_metadata(repo_id)
        total = sum(
            entry.data_offsets[1] - entry.data_offsets[0]
            for file in metadata.files_metadata.values()
            for entry in file.tensors.values()
        )
    except Exception:  # no safetensors, a network error: the architecture still prices it
        total = 0
    return HubCheckpoint(config, total or None)
