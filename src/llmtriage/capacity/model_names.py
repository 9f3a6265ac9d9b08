"""Checkpoint names derived from a base model: re-publishers, quantization suffixes, instruct/chat variants.

``Qwen/Qwen3-32B-AWQ``, ``unsloth/Llama-3.3-70B-Instruct-bnb-4bit`` and ``RedHatAI/Llama-3.1-8B-Instruct-FP8-dynamic``
are priced as their base architecture in the catalog plus the quantization their name states; the rules are
data (catalog/model_names.yaml). A name is matched to a base only when its family, version and size words all
agree, so a suggestion never passes one model size or family off as another. A name that matches no base gets an
error listing the catalog models of its family and size.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections import defaultdict
from dataclasses import dataclass, replace

from llmtriage import catalog
from llmtriage.capacity import hub
from llmtriage.capacity.model import ModelSpec
from llmtriage.capacity.quantization import QuantScheme, scheme
from llmtriage.capacity.resolve import from_catalog
from llmtriage.errors import UsageError

_WORD_SPLIT = re.compile(r"[-_\s]+")
_MAX_LISTED = 6  # catalog models an unknown name's error suggests


@dataclass(frozen=True, slots=True)
class _Suffix:
    pattern: re.Pattern[str]
    quantization: str
    bits: float | None


@dataclass(frozen=True, slots=True)
class _Naming:
    suffixes: tuple[_Suffix, ...]
    unpriceable: dict[str, str]
    variant_words: frozenset[str]
    second_pass_words: frozenset[str]
    second_pass: re.Pattern[str]
    leading_words: frozenset[str]
    size: re.Pattern[str]


@functools.cache
def _naming() -> _Naming:
    data = catalog.load_yaml("model_names.yaml")
    return _Naming(
        suffixes=tuple(
            _Suffix(
                re.compile(rf"[-_.]({s['pattern']})$"),
                str(s["quantization"]),
                float(s["bits"]) if s.get("bits") else None,
            )
            for s in data["quantization_suffixes"]
        ),
        unpriceable={str(k): str(v) for k, v in data["unpriceable_suffixes"].items()},
        variant_words=frozenset(data["variant_words"]),
        second_pass_words=frozenset(data["second_pass_words"]),
        second_pass=re.compile(data["second_pass_pattern"]),
        leading_words=frozenset(data["leading_words"]),
        size=re.compile(data["size_pattern"]),
    )


@dataclass(frozen=True, slots=True)
class DerivedName:
    """A checkpoint name taken apart: the base name left, the quantization its suffix states, and why not."""

    name: str
    stem: str
    quantization: QuantScheme | None
    suffix: str
    unpriceable: str | None


def split_name(model_id: str) -> DerivedName:
    """Peel the quantization suffixes off the repository name of ``model_id`` (its last path part)."""
    naming = _naming()
    name = model_id.rstrip("/").split("/")[-1]
    stem: str = name
    found: QuantScheme | None = None
    suffixes: list[str] = []
    for word, why in naming.unpriceable.items():
        if re.search(rf"[-_.]{word}$", stem, re.IGNORECASE):
            return DerivedName(name, stem[: -len(word) - 1], None, stem[-len(word) :], why)
    while True:
        lowered = stem.lower()
        matches = [(m, s) for s in naming.suffixes if (m := s.pattern.search(lowered))]
        if not matches:
            break
        match, suffix = max(matches, key=lambda pair: len(pair[0].group(0)))
        if found is None:  # the rightmost suffix names the checkpoint's own quantization
            found = scheme(suffix.quantization, f"the name's suffix {stem[match.start(1) :]!r}", bits=suffix.bits)
        suffixes.insert(0, stem[match.start(1) :])
        stem = stem[: match.start()]
    return DerivedName(name, stem, found, "-".join(suffixes), None)


def words(name: str, *, second_pass: bool = False, keep_variants: bool = False) -> tuple[str, ...]:
    """The words of a base name that must agree for two checkpoints to share an architecture
    (``keep_variants``: with the instruct/chat words, to pick the closest of several same-shaped bases)."""
    naming = _naming()
    parts = [w for w in _WORD_SPLIT.split(name.lower()) if w]
    while parts and parts[0] in naming.leading_words and len(parts) > 1:
        parts = parts[1:]
    kept = parts if keep_variants else [w for w in parts if w not in naming.variant_words]
    if second_pass:
        kept = [w for w in kept if w not in naming.second_pass_words and not naming.second_pass.match(w)]
    return tuple(kept)


def size_pattern() -> re.Pattern[str]:
    """The pattern of a word that states a size."""
    return _naming().size


def size_words(name: str) -> frozenset[str]:
    """The words of ``name`` that state a size (``32b``, ``a22b``, ``8x7b``)."""
    return frozenset(w for w in words(name) if _naming().size.match(w))


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


def derived_spec(name: str) -> ModelSpec | None:
    """``name`` priced as its catalog base plus the quantization its name states, else None."""
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


def unknown_name(name: str, online: bool) -> UsageError:
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
