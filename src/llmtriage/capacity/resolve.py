"""Which architecture a model name means, looked up where users keep models, in this order.

1. a local model directory or config.json (with the exact weight bytes of its safetensors);
2. the local Hugging Face cache (no network);
3. the bundled catalog, by id;
4. with ``online``, the Hugging Face Hub (config.json and the safetensors headers, no weights);
5. a derived name (re-published, quantized, instruct/chat variants) priced as its catalog base plus the
   quantization its name states, saying which base it assumed.

``fit``, the sim (``--model``) and ``diagnose`` (the model a launch names) all resolve through here.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from llmtriage import catalog
from llmtriage.capacity import hub
from llmtriage.capacity.model import ModelSpec, read_config, safetensors_bytes, spec_from_config
from llmtriage.errors import UsageError

_CACHE_DIR = re.compile(r"(?:^|/)models--([^/]+?)--([^/]+)(?:/|$)")


def _from_directory(directory: Path, name: str, source: str) -> ModelSpec:
    config = directory / "config.json"
    if not config.is_file():
        raise UsageError(f"--model {name}: the directory has no config.json", "give the model's own directory")
    exact = safetensors_bytes(directory) or hub.index_bytes(directory)
    return spec_from_config(read_config(config), name, source or str(config), weights_bytes=exact)


def from_cache(repo_id: str) -> ModelSpec | None:
    """``repo_id`` as the local Hugging Face cache holds it, else None."""
    snapshot = hub.cached_snapshot(repo_id)
    if snapshot is None:
        return None
    spec = _from_directory(snapshot.directory, repo_id, f"Hugging Face cache: {snapshot.directory}")
    return replace(spec, note=f"read from the local Hugging Face cache ({snapshot.directory})")


def from_catalog(model_id: str) -> ModelSpec | None:
    """The catalog model ``model_id`` (case-insensitive), else None."""
    models = catalog.models()
    entry = models.get(model_id) or next((m for k, m in models.items() if k.lower() == model_id.lower()), None)
    if entry is None:
        return None
    return spec_from_config(entry.config, entry.id, entry.source)


def _repo_id_in_cache_path(name: str) -> str | None:
    """``org/name`` from a path into someone's Hugging Face cache (``.../models--Qwen--Qwen3-8B/snapshots/ab12``)."""
    match = _CACHE_DIR.search(name)
    return f"{match.group(1)}/{match.group(2)}" if match else None


def resolve_model(name: str, *, online: bool = False) -> ModelSpec:
    """The architecture (and quantization) ``name`` means; a name nothing resolves is a usage error."""
    path = Path(name).expanduser()
    if path.is_dir():
        return _from_directory(path, path.name, "")
    if path.is_file():
        return spec_from_config(read_config(path), path.parent.name or path.name, str(path))
    cached_as = _repo_id_in_cache_path(name)
    if cached_as is not None:
        return resolve_model(cached_as, online=online)
    cached = from_cache(name)
    if cached is not None:
        return cached
    found = from_catalog(name)
    if found is not None:
        return found
    if online and name.count("/") == 1 and not name.startswith(("/", ".", "~")):
        checkpoint = hub.fetch(name)
        spec = spec_from_config(
            read_config(checkpoint.config_path),
            name,
            f"https://huggingface.co/{name}",
            weights_bytes=checkpoint.weights_bytes,
        )
        return replace(spec, note=f"read from the Hugging Face Hub ({name})")
    # Only names the catalog does not hold pay for the naming rules' import (~1.5 ms of `fit`'s start-up).
    from llmtriage.capacity import model_names

    derived = model_names.derived_spec(name)
    if derived is not None:
        return derived
    raise model_names.unknown_name(name, online)


def find_model(name: str) -> ModelSpec | None:
    """What ``name`` resolves to offline, or None: a launch's --model may be a path on the server's machine
    (``/models/Qwen2.5-7B-Instruct-AWQ``), which resolves by its last part."""
    try:
        return resolve_model(name)
    except UsageError:
        return None
