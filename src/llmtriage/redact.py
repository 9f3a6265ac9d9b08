"""Secret scrubbing: one mandatory pass before anything is written, with a stable map.

A :class:`Redactor` replaces every secret it finds with a placeholder such as ``<redacted:hf_token:1>``;
the same secret always becomes the same placeholder (one Redactor per capture, so a token in the
environment, the command line and the log reads the same everywhere), and ``counts`` says how many
replacements each kind of detector made. Detectors are data (``catalog/redaction.yaml``): known token
formats (ported from gitleaks, detect-secrets and kingfisher), passwords in URLs, webhook URLs, ``Authorization``
headers, and names that hold secrets (``HF_TOKEN=...``, ``PGPASSWORD=...``, ``API_KEYS=a,b``, ``--api-key ...``,
``'api_key': [...]``, ``{\\"api_key\\": \\"...\\"}`` inside a JSON string, ``password: ...``). A secret learned
from its name is also replaced wherever its exact text recurs. Hashes, UUIDs and model names are left alone.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from llmtriage.catalog import CatalogError, load_yaml

PLACEHOLDER_PREFIX = "<redacted:"

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_QUOTED_ITEM = re.compile(r"""(?P<q>["'])(?P<item>(?:(?!(?P=q))[^\\\n]|\\.)*)(?P=q)""")
# A bare value ends at white space, quotes, separators, brackets, and at a backslash escape (\n, \", \\).
_BARE = r"""(?:[^\s'",;&{}\[\]()\\]|\\(?![nrtu"'\\/]))+"""
_QUOTED = r""""(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|\[[^\]\n]*\]"""
# An item quoted with escaped quotes: JSON inside a JSON string ({\"api_key\": \"...\"}), escaped once or more.
_ESCAPED = r"""(?P<esc>\\+)(?P<q>["'])(?P<item>[^\n]*?)(?P=esc)(?P=q)"""
_ESCAPED_ITEM = re.compile(_ESCAPED)
_SHELL_VARIABLE = r"\$\{[^}\s]*\}"  # ${HF_TOKEN} (not a secret), ${DB_PASSWORD:-hunter2} (one)
_VALUE = re.compile(rf"{_ESCAPED}|{_QUOTED}|{_SHELL_VARIABLE}|{_BARE}")
# The value of a plural name (API_KEYS=a,b): a comma-separated list, each item a secret of its own.
_VALUES = re.compile(rf"{_ESCAPED}|{_QUOTED}|{_SHELL_VARIABLE}|{_BARE}(?:,{_BARE})*")
_LIST_ITEM = re.compile(r"[^,\s]+(?:\s+[^,\s]+)*")
_ESCAPED_LIST = re.compile(r"\[\s*\\")  # [\"a\", \"b\"]

# What a name holds: one secret, or a comma-separated list of them (API_KEYS=a,b).
Holds = Literal["one", "many"]


@dataclass(frozen=True, slots=True)
class Detector:
    """A secret format in text: ``kind`` names the placeholder; group ``secret`` (or the match) is replaced."""

    kind: str
    pattern: re.Pattern[str]
    hints: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class RedactionRules:
    """catalog/redaction.yaml, compiled."""

    detectors: tuple[Detector, ...]
    strong_words: frozenset[str]
    last_words: frozenset[str]
    plural_last_words: frozenset[str]
    plural_qualifiers: frozenset[str]
    not_last_words: frozenset[str]
    not_secret_names: frozenset[str]
    not_secret_values: frozenset[str]
    not_secret_value_pattern: re.Pattern[str]
    min_literal_chars: int
    named_value: re.Pattern[bytes]

    def is_secret_name(self, name: str) -> bool:
        """True when ``name`` (an env var, flag, key) holds a secret (see catalog/redaction.yaml for the rule)."""
        return self.secret_name_kind(name) is not None

    def secret_name_kind(self, name: str) -> Holds | None:
        """``"one"`` when ``name`` holds a secret, ``"many"`` when it holds a comma-separated list of them
        (``API_KEYS``, ``SECRETS``), None when it holds none."""
        bare = name.lstrip("-")
        if bare.upper() in self.not_secret_names or bare.rpartition(".")[2].upper() in self.not_secret_names:
            return None  # env.PWD: a runbook entry's config key
        words = [w.lower() for w in _WORD.findall(bare)]
        if not words or words[-1] in self.not_last_words:
            return None
        last = words[-1]
        secret = (
            last in self.last_words
            or any(w.endswith(strong) for w in words for strong in self.strong_words)
            or (last in self.plural_last_words and len(words) > 1 and words[-2] in self.plural_qualifiers)
        )
        if not secret:
            return None
        singular = last[:-1] if last.endswith("s") else ""
        plural = last in self.plural_last_words or (
            singular in self.last_words or any(singular.endswith(strong) for strong in self.strong_words)
        )
        return "many" if plural and singular else "one"

    def is_secret_value(self, value: str) -> bool:
        """False for values that are never secrets (empty, booleans, None, numbers) and for placeholders."""
        stripped = value.strip()
        return (
            stripped.lower() not in self.not_secret_values
            and self.not_secret_value_pattern.fullmatch(stripped) is None
            and not stripped.startswith(PLACEHOLDER_PREFIX)
        )


@functools.cache
def rules() -> RedactionRules:
    """The packaged redaction rules, loaded and checked once."""
    data = load_yaml("redaction.yaml")
    detectors = []
    for raw in data["detectors"]:
        try:
            pattern = re.compile(raw["pattern"])
        except re.error as e:
            raise CatalogError(f"redaction detector {raw['kind']}: bad pattern: {e}") from e
        hints = tuple(str(h) for h in raw.get("hints", ()))
        if any(h != h.lower() for h in hints):
            raise CatalogError(f"redaction detector {raw['kind']}: hints must be lower case")
        detectors.append(Detector(kind=str(raw["kind"]), pattern=pattern, hints=tuple(h.encode() for h in hints)))
    strong = _words(data, "strong_words")
    last = _words(data, "last_words")
    plural = _words(data, "plural_last_words")
    # A word that holds another (password: pass, keys: key) finds no candidate the shorter one misses.
    anchors = {w for w in strong | last | plural if not any(o != w and o in w for o in strong | last | plural)}
    words = "|".join(sorted(map(re.escape, anchors), key=lambda w: (-len(w), w)))  # the same in every process
    # Where a name holding one of the words ends and its value begins: `=`/`:` (after a quote, or an escaped
    # quote: \"api_key\": ...), or for a --flag a space. Candidates only (found by a word, the name is read
    # leftwards from there): is_secret_name() decides, so prompt_token_ids or --ssl-keyfile go through untouched.
    # It runs over _folded(text), where a case-insensitive search is eight times faster than with (?i).
    named_value = re.compile(rf"(?:{words})[\w.-]*(?P<sep>\\*[\"']?[ \t]*[:=][ \t]*|[ \t]+)".encode())
    return RedactionRules(
        detectors=tuple(detectors),
        strong_words=strong,
        last_words=last,
        plural_last_words=plural,
        plural_qualifiers=_words(data, "plural_qualifiers"),
        not_last_words=_words(data, "not_last_words"),
        not_secret_names=frozenset(str(n).upper() for n in data.get("not_secret_names", ())),
        not_secret_values=frozenset(str(v).lower() for v in data["not_secret_values"]),
        not_secret_value_pattern=re.compile(data["not_secret_value_pattern"]),
        min_literal_chars=int(data["min_literal_chars"]),
        named_value=named_value,
    )


def _words(data: dict[str, list[object]], key: str) -> frozenset[str]:
    return frozenset(str(w).lower() for w in data.get(key, ()))


def _escaped_quoted(m: re.Match[str], inner: str) -> str:
    """``inner`` between the escaped quotes ``m`` found (``\\"`` or ``\\\\\\"``) around its item."""
    quote = m.group("esc") + m.group("q")
    return quote + inner + quote


def _finder(patterns: Sequence[bytes]) -> Callable[[bytes], bool]:
    """Whether bytes hold a match of one of ``patterns`` (without named groups). With Hyperscan when it is installed:
    Python's re tries an alternation of many literals at ~50 ns a character, most of the cost of redacting a log
    line; Hyperscan takes ~0.4 µs a line."""
    from llmtriage.parse.scanner import hyperscan, stored_database

    if hyperscan is None:  # pragma: no cover - platforms without a Hyperscan wheel
        pattern = re.compile(b"|".join(b"(?:%s)" % p for p in patterns))
        return lambda text: pattern.search(text) is not None
    key = tuple(patterns)
    flags = [hyperscan.HS_FLAG_SINGLEMATCH] * len(key)

    def compile_database() -> Any:  # ~50 ms: stored, so that a run only loads it
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(expressions=list(key), ids=list(range(len(key))), elements=len(key), flags=flags)
        return db

    def holds(text: bytes) -> bool:
        # A database's scratch space serves one scan at a time: one database a thread, compiled on its first use.
        databases: dict[tuple[bytes, ...], Any] = _THREAD.__dict__.setdefault("finder_databases", {})
        db = databases.get(key)
        if db is None:
            db = databases[key] = stored_database("redact-hints", b"", key, flags, compile_database)
        found: list[int] = []
        db.scan(text, match_event_handler=lambda pattern_id, *_: found.append(pattern_id))
        return bool(found)

    return holds


_THREAD = threading.local()


def _folded(text: str) -> bytes:
    """``text`` as lower-case ASCII bytes, one byte per character (others become ``?``): offsets carry over."""
    return text.encode("ascii", "replace").lower()


class Redactor:
    """Replaces secrets with stable placeholders and counts what it replaced, by kind. Thread-safe."""

    def __init__(self, redaction_rules: RedactionRules | None = None) -> None:
        self.rules = redaction_rules or rules()
        self.counts: dict[str, int] = {}
        self._placeholders: dict[str, str] = {}
        self._numbers: dict[str, int] = {}
        self._literals: re.Pattern[str] | None = None
        self._lock = threading.RLock()
        # One search for every detector's hints: most lines hold none, and then no detector needs a look.
        # Longest first (an alternation takes the first that fits), then by text: the same order in every process,
        # so the stored database of one run is found by the next.
        hints = sorted({h for d in self.rules.detectors for h in d.hints}, key=lambda h: (-len(h), h))
        every_detector_hinted = all(d.hints for d in self.rules.detectors)
        literals = [re.escape(h) for h in hints]
        self._any_hint = _finder(literals) if hints and every_detector_hinted else None
        # Most lines hold neither a hint nor a named value: then only the secrets learned may be in them.
        named_value = re.sub(rb"\(\?P<\w+>", b"(?:", self.rules.named_value.pattern)
        self._any_candidate = _finder([*literals, named_value]) if self._any_hint is not None else None

    @property
    def secrets_seen(self) -> int:
        """How many distinct secrets this redactor has replaced so far (it grows as secrets are learned)."""
        return len(self._placeholders)

    def redact_text(self, text: str) -> str:
        """``text`` with every secret replaced."""
        with self._lock:
            folded = _folded(text)
            if self._any_candidate is not None and not self._any_candidate(folded):
                return self.redact_known(text)
            hinted = self._any_hint is None or self._any_hint(folded)
            for detector in self.rules.detectors if hinted else ():
                if detector.hints and not any(h in folded for h in detector.hints):
                    continue
                text = detector.pattern.sub(functools.partial(self._replace_group, kind=detector.kind), text)
            text = self._redact_named_values(text)
            return self.redact_known(text)

    def redact_known(self, text: str) -> str:
        """``text`` with the secrets already learned (by this redactor) replaced wherever they recur."""
        with self._lock:
            if self._literals is None:
                return text
            return self._literals.sub(self._replace_literal, text)

    def redact_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """An environment with the values of secret-named variables replaced, and secrets in others too."""
        with self._lock:
            result = {}
            for name, value in env.items():
                holds = self.rules.secret_name_kind(name)
                if holds is not None and self.rules.is_secret_value(value):
                    result[name] = self._redact_secret(value, "secret_env_var", many=holds == "many")
                else:
                    result[name] = self.redact_text(value)
            return result

    def redact_argv(self, argv: Sequence[str]) -> list[str]:
        """A command line with the values of secret flags (``--api-key K``, ``--hf-token=T``) replaced."""
        with self._lock:
            result: list[str] = []
            secret_next: Holds | None = None
            for token in argv:
                if secret_next is not None and not token.startswith("-"):
                    result.append(self._redact_secret(token, "secret_flag", many=secret_next == "many"))
                    secret_next = None
                    continue
                secret_next = None
                flag, eq, value = token.partition("=")
                holds = self.rules.secret_name_kind(flag) if flag.startswith("-") else None
                if holds is not None:
                    if not eq:
                        secret_next = holds
                        result.append(token)
                    else:
                        result.append(f"{flag}={self._redact_secret(value, 'secret_flag', many=holds == 'many')}")
                    continue
                result.append(self.redact_text(token))
            return result

    # ------------------------------------------------------------ internals

    def _placeholder(self, secret: str, kind: str) -> str:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        found = self._placeholders.get(secret)
        if found is None:
            number = self._numbers.get(kind, 0) + 1
            self._numbers[kind] = number
            found = f"{PLACEHOLDER_PREFIX}{kind}:{number}>"
            self._placeholders[secret] = found
            if len(secret) >= self.rules.min_literal_chars:
                known = sorted((s for s in self._placeholders if len(s) >= self.rules.min_literal_chars), key=len)
                self._literals = re.compile("|".join(re.escape(s) for s in reversed(known)))
        return found

    def _replace_group(self, m: re.Match[str], kind: str) -> str:
        if "secret" not in m.re.groupindex:
            return self._placeholder(m.group(0), kind)
        secret = m.group("secret")
        if secret.startswith(PLACEHOLDER_PREFIX):
            return m.group(0)  # already replaced (by this detector or an earlier one)
        start, end = m.span("secret")
        whole = m.group(0)
        offset = m.start()
        return whole[: start - offset] + self._placeholder(secret, kind) + whole[end - offset :]

    def _replace_literal(self, m: re.Match[str]) -> str:
        placeholder = self._placeholders[m.group(0)]
        kind = placeholder[len(PLACEHOLDER_PREFIX) :].rsplit(":", 1)[0]
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return placeholder

    def _redact_named_values(self, text: str) -> str:
        pattern = self.rules.named_value
        folded = _folded(text)
        out: list[str] = []
        done = 0
        pos = 0
        while (m := pattern.search(folded, pos)) is not None:
            pos = m.end()
            name_end = m.start("sep")
            name_start = m.start()
            while name_start > 0 and (text[name_start - 1].isalnum() or text[name_start - 1] in "_.-"):
                name_start -= 1
            name = text[name_start:name_end]
            if name_start > 0 and text[name_start - 1] in ":/":
                continue  # inside a placeholder (<redacted:hf_token:1>), a metric name or a path (/etc/passwd:)
            flag = name.startswith("--")
            holds = self.rules.secret_name_kind(name)
            if (not flag and not m.group("sep").strip()) or holds is None:
                continue
            value = (_VALUES if holds == "many" else _VALUE).match(text, pos)
            if value is None or (flag and value.group(0).startswith("-")):
                continue
            out.append(text[done : value.start()])
            out.append(self._redact_value(value, "secret_flag" if flag else "secret_assignment", many=holds == "many"))
            done = pos = value.end()
        out.append(text[done:])
        return "".join(out)

    def _redact_value(self, m: re.Match[str], kind: str, *, many: bool) -> str:
        value = m.group(0)
        if m.group("esc"):  # {\"api_key\": \"...\"}: JSON inside a JSON string
            return _escaped_quoted(m, self._redact_secret(m.group("item"), kind, many=many))
        if value.startswith("["):
            if _ESCAPED_LIST.match(value):
                return _ESCAPED_ITEM.sub(lambda q: _escaped_quoted(q, self._redact_bare(q.group("item"), kind)), value)
            return _QUOTED_ITEM.sub(
                lambda q: q.group("q") + self._redact_bare(q.group("item"), kind) + q.group("q"), value
            )
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            return value[0] + self._redact_secret(value[1:-1], kind, many=many) + value[0]
        return self._redact_secret(value, kind, many=many)

    def _redact_secret(self, value: str, kind: str, *, many: bool) -> str:
        """``value`` replaced (each comma-separated item of it when ``many``), unless it is never a secret."""
        if many and "," in value:
            return _LIST_ITEM.sub(lambda item: self._redact_bare(item.group(0), kind), value)
        return self._redact_bare(value, kind)

    def _redact_bare(self, value: str, kind: str) -> str:
        return self._placeholder(value, kind) if self.rules.is_secret_value(value) else value
