"""Checkpoint names derived from a base model: re-publishers, quantization suffixes, instruct/chat variants.

``Qwen/Qwen3-32B-AWQ``, ``unsloth/Llama-3.3-70B-Instruct-bnb-4bit`` and ``RedHatAI/Llama-3.1-8B-Instruct-FP8-dynamic``
are priced as their base architecture in the catalog plus the quantization their name states; the rules are
data (catalog/model_names.yaml). A name is matched to a base only when its family, version and size words all
agree, so a suggestion never passes one model size or family off as another.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from llmtriage import catalog
from llmtriage.capacity.quantization import QuantScheme, scheme

_WORD_SPLIT = re.compile(r"[-_\s]+")


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
