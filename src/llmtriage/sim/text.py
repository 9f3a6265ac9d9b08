"""Tokens without a tokenizer: prompts are counted at ~4 characters a token, hashed per 16-token block for
prefix caching, and outputs are words drawn deterministically per request."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")

CHARS_PER_TOKEN = 4
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_PER_REPLY = 3

WORDS = tuple(
    [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "that",
        "for",
        "it",
        "as",
        "was",
        "with",
        "be",
        "by",
        "on",
        "not",
        "he",
        "this",
        "are",
        "or",
        "his",
        "from",
        "at",
        "which",
        "but",
        "have",
        "an",
        "they",
        "you",
        "were",
        "her",
        "she",
        "there",
        "one",
        "all",
        "we",
        "their",
        "been",
        "has",
        "when",
        "who",
        "will",
        "more",
        "no",
        "if",
        "out",
        "so",
        "said",
        "what",
        "up",
        "its",
        "about",
        "into",
        "than",
        "them",
        "can",
        "only",
        "other",
        "new",
        "some",
        "could",
        "time",
        "these",
        "two",
        "may",
        "then",
        "do",
        "first",
        "any",
        "my",
        "now",
        "such",
        "like",
        "our",
        "over",
        "man",
        "me",
        "even",
        "most",
        "made",
        "after",
        "also",
        "did",
        "many",
        "before",
        "must",
        "through",
        "back",
        "years",
        "where",
        "much",
        "your",
        "way",
        "well",
        "down",
        "should",
        "because",
        "each",
        "just",
        "those",
        "people",
        "how",
        "too",
        "little",
        "state",
        "good",
        "very",
        "make",
        "world",
        "still",
        "own",
        "see",
        "men",
        "work",
        "long",
        "get",
        "here",
        "between",
        "both",
        "life",
        "being",
        "under",
        "never",
        "day",
        "same",
        "another",
        "know",
        "while",
        "last",
        "might",
        "us",
        "great",
        "old",
        "year",
        "off",
        "come",
        "since",
        "against",
        "go",
        "came",
        "right",
        "used",
        "take",
        "three",
        "system",
        "model",
        "memory",
        "server",
        "token",
        "cache",
        "block",
        "queue",
        "batch",
        "prompt",
        "decode",
        "prefill",
        "kernel",
        "stream",
        "request",
        "latency",
    ]
)


def count_prompt_tokens(text: str) -> int:
    """Approximate tokens of a prompt string (at least 1)."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def render_chat(messages: list[dict[str, Any]]) -> str:
    """The prompt a chat template would produce, close enough for counting and prefix hashing."""
    parts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<|{message.get('role', 'user')}|>\n{content or ''}\n")
    return "".join(parts)


def render_chat_prompt(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """The rendered chat prompt and its tokens: the contents plus the template's per-message and reply overhead."""
    rendered = render_chat(messages)
    tokens = count_prompt_tokens(rendered) + CHAT_TOKENS_PER_MESSAGE * len(messages) + CHAT_TOKENS_PER_REPLY
    return rendered, tokens


def block_hashes(text: str, prompt_tokens: int, block_size: int) -> tuple[int, ...]:
    """Chained hashes of the prompt's full KV blocks: equal prefixes hash equal."""
    hashes = []
    previous = b""
    block_chars = block_size * CHARS_PER_TOKEN
    for index in range(prompt_tokens // block_size):
        chunk = text[index * block_chars : (index + 1) * block_chars].encode("utf-8", "replace")
        digest = hashlib.blake2b(previous + chunk, digest_size=8).digest()
        hashes.append(int.from_bytes(digest, "little"))
        previous = digest
    return tuple(hashes)


# The output tokens, one per word, as text and as JSON string literals (the streaming hot path writes these).
TOKENS = tuple(" " + w for w in WORDS)
TOKENS_JSON = tuple(json.dumps(t) for t in TOKENS)
# Consecutive tokens of a request step through the words by this stride (coprime with their count: all are used).
_STRIDE = 7919


def pick(table: Sequence[T], seed: int, start: int, stop: int) -> list[T]:
    """The entries of ``table`` (one per word, in :data:`WORDS` order) for a request's output tokens ``start`` to
    ``stop - 1``."""
    n = len(WORDS)
    return [table[(seed + index * _STRIDE) % n] for index in range(start, stop)]
