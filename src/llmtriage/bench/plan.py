"""From configuration to requests: mixes, deterministic prompts, JSONL prompts, arrival times, worker shares.

Everything here is a pure function of the configuration and its seed: the same flags give the same
prompts, the same classes and the same schedule, whichever worker sends which request.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator

from llmtriage.bench.model import Arrival, BenchConfig, Endpoint, PlannedRequest, PromptLine, RequestClass
from llmtriage.errors import UsageError
from llmtriage.urls import check_url

_MIX_KEYS = {"prompt_chars", "max_tokens", "weight"}
# Bounds on what a run asks for: the prompt pool is built in memory, and servers take max_tokens as int32.
MAX_PROMPT_CHARS = 2**24
MAX_OUTPUT_TOKENS = 2**31 - 1
MAX_WEIGHT = 1e9
# Common English words: text a tokenizer splits like prose (about 1 token per 4-5 characters).
_TEXT = (
    "the of and to in is was for on that with as by at from it be are this an which or have one had not but "
    "what all were when we there can more if no out so said up its about into than them only other new some "
    "could time these two may then first any like now my such make over our even most me state after also "
    "made many did must before back see through way where get much go well your know should down work year "
    "because come people just say each those take day good how long little use three own life great between "
    "under never world found still last place while might old right being small hand high thought part "
    "engine memory token batch cache queue model server request latency stream decode prefill window block"
)
_WORDS = tuple(_TEXT.split())


def parse_mix(text: str) -> RequestClass:
    """``long:prompt_chars=12000,max_tokens=32,weight=1`` -> a request class."""
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not sep or not name:
        raise UsageError(f"bad --mix {text!r}", "use NAME:prompt_chars=N,max_tokens=N,weight=W")
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, raw = part.partition("=")
        key = key.strip()
        if not eq or key not in _MIX_KEYS:
            raise UsageError(f"bad --mix item {part!r}", f"known: {', '.join(sorted(_MIX_KEYS))}")
        try:
            values[key] = float(raw)
        except ValueError as e:
            raise UsageError(f"bad --mix value {part!r}", "a number") from e
    missing = {"prompt_chars", "max_tokens"} - values.keys()
    if missing:
        raise UsageError(
            f"--mix {name} lacks {', '.join(sorted(missing))}", "e.g. short:prompt_chars=200,max_tokens=64"
        )
    weight = values.get("weight", 1.0)
    if not (math.isfinite(weight) and 0 < weight <= MAX_WEIGHT):
        raise UsageError(f"--mix {name}: weight={weight:g}: must be a number > 0 and <= {MAX_WEIGHT:g}")
    return RequestClass(
        name,
        whole(f"--mix {name}: prompt_chars", values["prompt_chars"], MAX_PROMPT_CHARS),
        whole(f"--mix {name}: max_tokens", values["max_tokens"], MAX_OUTPUT_TOKENS),
        weight,
    )


def whole(name: str, value: float, limit: int) -> int:
    """``value`` as an int when it is a whole number in [1, ``limit``]; a UsageError naming ``name`` otherwise."""
    whole_number = isinstance(value, int) or (math.isfinite(value) and value.is_integer())
    if whole_number and 1 <= value <= limit:
        return int(value)
    shown = str(value) if isinstance(value, int) else f"{value:g}"
    raise UsageError(f"{name}={shown}: must be a whole number from 1 to {limit:,}")


def read_prompts(text: str, source: str) -> tuple[PromptLine, ...]:
    """JSONL, one ``{"prompt": "...", "max_tokens": N}`` per line (``max_tokens`` optional; blank lines skipped)."""
    prompts: list[PromptLine] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"{source}:{number}: not JSON ({e.msg})", 'one {"prompt": "..."} per line') from e
        except (ValueError, RecursionError) as e:  # a number of too many digits, nesting too deep
            raise UsageError(
                f"{source}:{number}: not a prompt line ({e})"[:200], 'one {"prompt": "..."} per line'
            ) from e
        prompt = item.get("prompt") if isinstance(item, dict) else None
        max_tokens = item.get("max_tokens") if isinstance(item, dict) else None
        if not isinstance(prompt, str) or not prompt:
            raise UsageError(f'{source}:{number}: no "prompt" string', 'one {"prompt": "..."} per line')
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= MAX_OUTPUT_TOKENS
        ):
            raise UsageError(f'{source}:{number}: "max_tokens" must be a whole number from 1 to {MAX_OUTPUT_TOKENS:,}')
        prompts.append(PromptLine(prompt, max_tokens))
    if not prompts:
        raise UsageError(f"{source}: no prompts", 'one {"prompt": "..."} per line')
    return tuple(prompts)


class RequestFactory:
    """Builds request ``index`` of a run: its class, its prompt and its JSON body, the same on every worker."""

    def __init__(self, config: BenchConfig) -> None:
        self._config = config
        self._weights = [c.weight for c in config.classes]
        longest = max(c.prompt_chars for c in config.classes)
        rng = random.Random(config.seed)
        words: list[str] = []
        size = 0
        # A pool long enough for the longest prompt at any of 64 Ki offsets.
        while size < longest + 65536:
            word = rng.choice(_WORDS)
            words.append(word)
            size += len(word) + 1
        self._pool = " ".join(words)

    def make(self, index: int, warmup: bool) -> PlannedRequest:
        """Request ``index``; ``warmup`` marks it as not measured."""
        config = self._config
        rng = random.Random(config.seed * 1_000_003 + index)
        if config.prompts:
            line = config.prompts[index % len(config.prompts)]
            prompt, class_name = line.prompt, "file"
            max_tokens = line.max_tokens or config.classes[0].max_tokens
        else:
            chosen = config.classes[0] if len(config.classes) == 1 else rng.choices(config.classes, self._weights)[0]
            prompt, class_name, max_tokens = (
                self._prompt(index, chosen.prompt_chars, rng),
                chosen.name,
                chosen.max_tokens,
            )
        return PlannedRequest(
            index=index,
            request_id=f"bench-{config.run_id}-{index}",
            class_name=class_name,
            warmup=warmup,
            prompt_chars=len(prompt),
            max_tokens=max_tokens,
            body=self._body(prompt, max_tokens),
        )

    def _prompt(self, index: int, chars: int, rng: random.Random) -> str:
        # A distinct head per request keeps prefix caches from serving one request's prompt to another.
        head = f"Request {index} of run seed {self._config.seed}. "
        offset = rng.randrange(65536)
        text = head + self._pool[offset : offset + chars]
        return text[:chars]

    def _body(self, prompt: str, max_tokens: int) -> bytes:
        config = self._config
        body: dict[str, object] = {"model": config.model} if config.model else {}
        if config.endpoint is Endpoint.chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        body.update(max_tokens=max_tokens, stream=True, stream_options={"include_usage": True})
        if config.ignore_eos:
            body["ignore_eos"] = True
        return json.dumps(body).encode()


def arrival_offsets_s(config: BenchConfig) -> Iterator[float]:
    """Open loop: the send time of request 0, 1, 2, ... in seconds from the start (the first at 0)."""
    rate = config.request_rate_per_s
    if rate is None or rate <= 0:
        raise UsageError("an open-loop run needs --request-rate > 0")
    rng = random.Random(config.seed)
    at = 0.0
    while True:
        yield at
        at += rng.expovariate(rate) if config.arrival is Arrival.poisson else 1.0 / rate


def share(total: int, worker: int, workers: int) -> int:
    """Worker ``worker``'s share of ``total`` when split as evenly as integers allow."""
    return total // workers + (1 if worker < total % workers else 0)


def server_root(url: str) -> str:
    """``http://h:8000/v1/`` -> ``http://h:8000``: the root the API paths hang from."""
    root = check_url(url.strip(), "--base-url").rstrip("/")
    return root.removesuffix("/v1")
