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

import difflib
import functools
import re
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from llmtriage import catalog
from llmtriage.capacity import hub
from llmtriage.capacity.model import ModelSpec, read_config, safetensors_bytes, spec_from_config
from llmtriage.capacity.model_names import DerivedName, size_pattern, size_words, split_name, words
from llmtriage.errors import UsageError

_MAX_LISTED = 6
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


@functools.cache
def _catalog_by_words(second_pass: bool) -> dict[tuple[str, ...], tuple[str, ...]]:
    index: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for model_id in catalog.models():
        index[words(model_id.split("/")[-1], second_pass=second_pass)].append(model_id)
    return {key: tuple(sorted(ids)) for key, ids in index.items()}


def _contained_key(stem_words: tuple[str, ...]) -> tuple[str, ...] | None:
    """The longest catalog name, size included, that ends a fine-tune's name (``Hermes-3-Llama-3.1-8B`` ends in
    ``Llama-3.1-8B``); None when none or two different ones do. A word after the base name (``Llama-3.1-8B-Instrukt``)
    is more likely a typo than a fine-tune."""
    size = size_pattern()
    found = {
        key
        for key in _catalog_by_words(False)
        if any(size.match(w) for w in key) and len(key) < len(stem_words) and stem_words[-len(key) :] == key
    }
    longest = max((len(k) for k in found), default=0)
    best = [k for k in found if len(k) == longest]
    return best[0] if len(best) == 1 else None


def _base_for(derived: DerivedName) -> tuple[ModelSpec, str] | None:
    """The catalog base of ``derived``, and what had to be assumed to reach it ("" for nothing)."""
    for second_pass in (False, True):
        ids = _catalog_by_words(second_pass).get(words(derived.stem, second_pass=second_pass), ())
        if ids:
            return _one_shape(
                derived, ids
            ), "its release or reasoning variant assumed to share it" if second_pass else ""
    contained = _contained_key(words(derived.stem))
    if contained is not None:
        ids = _catalog_by_words(False)[contained]
        return _one_shape(derived, ids), "a fine-tune assumed to keep the architecture its name states"
    return None


def _one_shape(derived: DerivedName, ids: tuple[str, ...]) -> ModelSpec:
    """The catalog model among ``ids`` named most like ``derived``; ids of different shapes are ambiguous."""
    specs = [s for s in (from_catalog(i) for i in ids) if s is not None]
    if len({s.shape for s in specs}) > 1:
        listed = "; ".join(f"{s.name} ({s.num_layers} layers, hidden {s.hidden_size})" for s in specs)
        raise UsageError(
            f"--model {derived.name!r}: matches catalog models of different shapes: {listed}",
            "give the one you serve, or its config.json",
        )
    wanted = set(words(derived.stem, keep_variants=True))
    return min(specs, key=lambda s: (len(wanted ^ set(words(s.name.split("/")[-1], keep_variants=True))), s.name))


def _derived(name: str) -> ModelSpec | None:
    derived = split_name(name)
    if derived.unpriceable:
        raise UsageError(f"--model {name!r}: {derived.unpriceable}")
    found = _base_for(derived)
    if found is None:
        return None
    base, assumed = found
    quant = derived.quantization or base.quant
    how = [f"priced as {base.name}'s architecture"]
    if assumed:
        how.append(f"({assumed})")
    if derived.quantization is not None:
        how.append(f"with {derived.quantization.label} from the name's suffix {derived.suffix!r}")
    elif quant is not None:
        how.append(f"with the base checkpoint's {quant.label}")
    note = f"{name}: not in the catalog; " + " ".join(how)
    return replace(base, name=name, quant=quant, note=note, weights_bytes=None)


def _same_family(stem: str) -> list[str]:
    """Catalog ids of the family of ``stem`` (its first word; else that word without its version), closest first."""
    first = next(iter(words(stem)), "")
    if not first:
        return []
    ids = sorted(catalog.models())
    family = [i for i in ids if next(iter(words(i.split("/")[-1])), "") == first]
    if not family:
        loose = first.rstrip("0123456789.")
        family = [i for i in ids if loose and next(iter(words(i.split("/")[-1])), "").startswith(loose)]
    similarity = {i: difflib.SequenceMatcher(None, stem.lower(), i.split("/")[-1].lower()).ratio() for i in family}
    return sorted(family, key=lambda i: -similarity[i])


def _unknown(name: str, online: bool) -> UsageError:
    """The error for a name nothing resolves, listing only catalog models of the same family and size."""
    stem = split_name(name).stem
    wanted_sizes = size_words(stem)
    same = _same_family(stem)
    if wanted_sizes:
        same = [i for i in same if size_words(i.split("/")[-1]) == wanted_sizes]
    if same and wanted_sizes:
        hint = f"did you mean {', '.join(same[:_MAX_LISTED])}? (same family and size)"
    elif same:
        hint = f"catalog models of that family, each a different model: {', '.join(same[:_MAX_LISTED])}"
    else:
        hint = "no catalog model of that family and size"
    hint += "; or give the model's directory or config.json"
    if not online:
        hint += ", or --online to read its config.json from the Hugging Face Hub"
    where = f"not a local path, not in the Hugging Face cache ({hub.cache_dir()}), not in the catalog"
    return UsageError(f"--model {name!r}: {where}", hint)


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
    derived = _derived(name)
    if derived is not None:
        return derived
    raise _unknown(name, online)


def find_model(name: str) -> ModelSpec | None:
    """What ``name`` resolves to offline, or None: a launch's --model may be a path on the server's machine
    (``/models/Qwen2.5-7B-Instruct-AWQ``), which resolves by its last part."""
    try:
        return resolve_model(name)
    except UsageError:
        return None
