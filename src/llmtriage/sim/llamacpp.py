"""The simulator's llama.cpp personality: what `llama-server` shows the tools.

Shapes copied from a real llama-server (llama.cpp 0c1e570, recorded in tests/fixtures/llamacpp-cpu/): its log
lines at the default verbosity (``0.00.158.334 I slot launch_slot_: id  0 | task 70 | ...``: no access lines, no
periodic stats), the 15 ``llamacpp:`` families of /metrics with their HELP text, /health, /slots, and the 400 of
a prompt over a slot's context. Slots are the engine's running requests (``--parallel`` of them); requests
beyond them wait, as llamacpp:requests_deferred. A conformance test checks these against the live server
(tests/realllamacpp/test_sim_conformance.py).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from llmtriage.sim.engine import SimRequest

BUILD = "b1-0c1e570"
# llama-server batches at most this many tokens per decode (-b), so a long prompt is processed in pieces.
N_BATCH = 2048
DEFAULT_CTX_SIZE = 4096
DEFAULT_PARALLEL = 4

# (name, type, HELP) in the order the real server prints them.
FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "counter", "Total time spent processing prompts"),
    ("tokens_predicted_total", "counter", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "counter", "Total time spent generating tokens"),
    (
        "n_decode_total",
        "counter",
        "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
    ),
    ("n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated"),
    (
        "spec_decode_num_accepted_tokens_total",
        "counter",
        "Speculative: Total draft tokens accepted by the target model",
    ),
    ("spec_decode_num_drafts_total", "counter", "Speculative: Total speculative decoding verification steps"),
    ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s"),
    ("requests_processing", "gauge", "Number of requests processing"),
    ("requests_deferred", "gauge", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call"),
)

# A slot's sampling parameters as /slots shows them for a default request (the recorded server's values).
_SLOT_PARAMS: dict[str, Any] = {
    "seed": 4294967295, "temperature": 0.800000011920929, "dynatemp_range": 0.0, "dynatemp_exponent": 1.0,
    "top_k": 40, "top_p": 0.949999988079071, "min_p": 0.05000000074505806, "top_n_sigma": -1.0,
    "xtc_probability": 0.0, "xtc_threshold": 0.10000000149011612, "typical_p": 1.0, "repeat_last_n": 64,
    "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0,
    "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": 64, "mirostat": 0, "mirostat_tau": 5.0,
    "mirostat_eta": 0.10000000149011612, "adaptive_target": -1.0, "adaptive_decay": 0.8999999761581421,
    "max_tokens": -1, "n_predict": -1, "n_keep": 0, "n_discard": 0, "ignore_eos": False, "stream": True,
    "n_probs": 0, "min_keep": 0, "chat_format": "Content-only", "reasoning_format": "deepseek",
    "reasoning_in_content": False, "generation_prompt": "",
    "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
    "speculative.types": "none", "timings_per_token": False, "post_sampling_probs": False,
    "backend_sampling": False, "lora": [],
}  # fmt: skip


def context_error(prompt_tokens: int, n_ctx_slot: int) -> tuple[str, dict[str, Any]]:
    """The log message and the 400 body of a prompt over a slot's context."""
    message = (
        f"request ({prompt_tokens} tokens) exceeds the available context size ({n_ctx_slot} tokens), try increasing it"
    )
    body = {
        "error": {
            "code": 400,
            "message": message,
            "type": "exceed_context_size_error",
            "n_prompt_tokens": prompt_tokens,
            "n_ctx": n_ctx_slot,
        }
    }
    return message, body


LOADING_BODY: dict[str, Any] = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


class LlamaLog:
    """llama.cpp's log lines (common/log.cpp): minutes.seconds.ms.us since the start, a level letter, the
    subsystem and the function (12 characters, right-aligned); flushed every line."""

    def __init__(self, log_file: Path | None = None, echo: bool = True) -> None:
        self._t0 = time.monotonic()
        self._file: TextIO | None = log_file.open("a", encoding="utf-8", buffering=1) if log_file else None
        self._echo = echo

    def close(self) -> None:
        """Close the log file."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def line(self, level: str, subsystem: str, function: str, message: str) -> None:
        """One line: ``level`` is I, W or E; ``subsystem`` srv, slot or cmn."""
        us = int((time.monotonic() - self._t0) * 1e6)
        stamp = f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d}"
        text = f"{stamp} {level} {subsystem:<4} {function[:12]:>12}: {message}"
        if self._echo:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        if self._file is not None:
            self._file.write(text + "\n")

    def slot(self, function: str, slot: int, task: int, message: str) -> None:
        """A slot's line: ``id  N | task T | message``."""
        self.line("I", "slot", function, f"id {slot:2d} | task {task} | {message}")


@dataclass(slots=True)
class _Slot:
    """What /slots shows of one slot."""

    id: int
    task: int = -1
    request: SimRequest | None = None
    n_prompt_tokens: int = 0
    last_used_s: float = -1.0


@dataclass
class LlamaCppPersonality:
    """Slots, /metrics counters and log lines of one simulated llama-server, fed by the engine."""

    log: LlamaLog
    model_path: str
    n_ctx: int
    parallel: int
    kv_unified: bool
    host: str
    port: int
    slots: list[_Slot] = field(default_factory=list)
    tasks: int = 0
    prompt_tokens: int = 0
    prompt_tokens_cached: int = 0
    prompt_seconds: float = 0.0
    predicted_tokens: int = 0
    predicted_seconds: float = 0.0
    decodes: int = 0
    busy_slot_decodes: int = 0
    tokens_max: int = 0
    running: int = 0
    waiting: int = 0
    _bucket: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])

    def __post_init__(self) -> None:
        self.slots = [_Slot(i) for i in range(self.parallel)]

    @property
    def n_ctx_slot(self) -> int:
        """The context one slot holds: all of -c with a unified KV cache, else -c / --parallel."""
        return self.n_ctx if self.kv_unified else self.n_ctx // self.parallel

    def startup(self) -> None:
        """llama-server's start, as the recorded one printed it."""
        log = self.log
        log.line("I", "srv", "llama_server", "initializing ...")
        log.line(
            "I", "cmn", "common_param", "common_params_print_info: verbosity = 3 (adjust with the `-lv N` CLI arg)"
        )
        log.line(
            "W",
            "srv",
            "llama_server",
            "security: no API key is set and CORS allows all origins (see https://github.com/ggml-org/llama.cpp/pull/25655)",
        )
        log.line("I", "srv", "load_model", f"loading model '{self.model_path}'")
        log.line("I", "cmn", "init", "llama threadpool init, n_threads = 1")
        log.line(
            "I",
            "srv",
            "load_model",
            f"initializing, n_slots = {self.parallel}, n_ctx_slot = {self.n_ctx_slot}, "
            f"kv_unified = '{'true' if self.kv_unified else 'false'}'",
        )
        log.line("I", "srv", "llama_server", "model loaded")
        log.line("I", "srv", "llama_server", f"listening on http://{self.host}:{self.port}")

    def bind_failed(self) -> None:
        """The port is taken: llama-server says so and exits 1."""
        self.log.line("I", "srv", "llama_server", "initializing ...")
        self.log.line(
            "E", "srv", "start", f"couldn't bind HTTP server socket, hostname: {self.host}, port: {self.port}"
        )
        self.log.line("E", "srv", "llama_server", "exiting due to HTTP server error")

    def rejected(self, message: str) -> None:
        """A request refused as its slot takes it: the slot's lines around send_error, as the real server logs."""
        slot = self._least_recently_used() or self.slots[0]
        task = self.tasks
        self.tasks += 1
        self._log_launch(slot, task)
        self.log.line("E", "srv", "send_error", f"task id = {task}, error: {message}")
        self.log.slot("release", slot.id, task, "stop processing: n_tokens = 0, truncated = 0")
        self.log.line("W", "srv", "stop", f"cancel task, id_task = {task}")

    def _least_recently_used(self) -> _Slot | None:
        free = [s for s in self.slots if s.request is None]
        return min(free, key=lambda s: (s.last_used_s, -s.id)) if free else None

    def _log_launch(self, slot: _Slot, task: int) -> None:
        t_last = -1 if slot.last_used_s < 0 else int(slot.last_used_s * 1e6)
        self.log.slot("get_availabl", slot.id, -1, f"selected slot by LRU, t_last = {t_last}")
        self.log.slot("launch_slot_", slot.id, task, "processing task, is_child = 0")

    def shutdown(self) -> None:
        """The last line of a stopped server."""
        self.log.line("I", "srv", "operator()", "operator(): cleaning up before exit...")

    # ------------------------------------------------------------ the engine's observer

    def started(self, req: SimRequest, now: float) -> None:
        """A request takes a free slot (the least recently used)."""
        slot = self._least_recently_used()
        if slot is None:
            return
        slot.request, slot.task, slot.n_prompt_tokens = req, self.tasks, req.prompt_tokens
        self.tasks += 1
        self._log_launch(slot, slot.task)

    def finished(self, req: SimRequest, now: float) -> None:
        """A request ends: its timings, the counters llama.cpp moves only then, and the slot released."""
        slot = next((s for s in self.slots if s.request is req), None)
        if slot is None:
            return
        computed = req.prompt_tokens - req.cached_tokens
        prompt_s = (req.first_token_s or now) - (req.scheduled_s or now)
        decode_s = now - (req.first_token_s or now)
        self.prompt_tokens += computed
        self.prompt_tokens_cached += req.cached_tokens
        self.prompt_seconds += prompt_s
        self.predicted_tokens += req.output
        self.predicted_seconds += decode_s
        self.tokens_max = max(self.tokens_max, req.prompt_tokens + req.output)
        self._bucket = [
            self._bucket[0] + computed,
            self._bucket[1] + prompt_s,
            self._bucket[2] + req.output,
            self._bucket[3] + decode_s,
        ]
        log, task = self.log, slot.task
        if req.first_token_s is not None:
            log.slot("print_timing", slot.id, task, _timing("prompt eval time", prompt_s, computed))
            log.slot("print_timing", slot.id, task, _timing("       eval time", decode_s, req.output))
            total = prompt_s + decode_s
            log.slot(
                "print_timing",
                slot.id,
                task,
                f"      total time = {total * 1000:10.2f} ms / {computed + req.output:5d} tokens",
            )
        n_tokens = req.prompt_tokens + max(0, req.output - 1) if req.first_token_s is not None else 0
        log.slot("release", slot.id, task, f"stop processing: n_tokens = {n_tokens}, truncated = 0")
        slot.request, slot.last_used_s = None, now

    def stepped(self, busy_slots: int, running: int, waiting: int) -> None:
        """One llama_decode() call with ``busy_slots`` slots in it."""
        self.decodes += 1
        self.busy_slot_decodes += busy_slots
        self.running, self.waiting = running, waiting

    def queued(self, running: int, waiting: int) -> None:
        """The engine's queue changed outside a step."""
        self.running, self.waiting = running, waiting

    # ------------------------------------------------------------ endpoints

    def metrics_text(self) -> str:
        """/metrics, as llama-server prints it; the throughput gauges cover the time since the last scrape."""
        prompt_tps = self._bucket[0] / self._bucket[1] if self._bucket[1] > 0 else 0.0
        predicted_tps = self._bucket[2] / self._bucket[3] if self._bucket[3] > 0 else 0.0
        self._bucket = [0.0, 0.0, 0.0, 0.0]
        values: dict[str, float] = {
            "prompt_tokens_total": self.prompt_tokens,
            "prompt_tokens_cached_total": self.prompt_tokens_cached,
            "prompt_seconds_total": round(self.prompt_seconds, 6),
            "tokens_predicted_total": self.predicted_tokens,
            "tokens_predicted_seconds_total": round(self.predicted_seconds, 6),
            "n_decode_total": self.decodes,
            "n_tokens_max": self.tokens_max,
            "prompt_tokens_seconds": round(prompt_tps, 2),
            "predicted_tokens_seconds": round(predicted_tps, 2),
            "requests_processing": self.running,
            "requests_deferred": self.waiting,
            "n_busy_slots_per_decode": round(self.busy_slot_decodes / max(1, self.decodes), 4),
        }
        lines = []
        for name, kind, doc in FAMILIES:
            lines += [f"# HELP llamacpp:{name} {doc}", f"# TYPE llamacpp:{name} {kind}"]
            lines.append(f"llamacpp:{name} {values.get(name, 0):g}")
        return "\n".join(lines) + "\n"

    def slots_json(self) -> list[dict[str, Any]]:
        """/slots: one object per slot, the keys the real server gives."""
        shown = []
        for slot in self.slots:
            req = slot.request
            processing = req is not None and req.finish_reason is None
            decoded = req.output if req is not None else 0
            remain = (req.max_tokens - decoded) if req is not None and processing else -1
            shown.append(
                {
                    "id": slot.id,
                    "n_ctx": self.n_ctx_slot,
                    "speculative": False,
                    "is_processing": processing,
                    "id_task": slot.task,
                    "n_prompt_tokens": slot.n_prompt_tokens,
                    "n_prompt_tokens_processed": min(req.computed, req.prompt_tokens) if req is not None else 0,
                    "n_prompt_tokens_cache": req.cached_tokens if req is not None else 0,
                    "params": dict(_SLOT_PARAMS),
                    "next_token": [
                        {"has_next_token": processing, "has_new_line": False, "n_remain": remain, "n_decoded": decoded}
                    ],
                }
            )
        return shown


def _timing(what: str, seconds: float, tokens: int) -> str:
    ms = seconds * 1000
    per_token = ms / tokens if tokens else 0.0
    rate = tokens / seconds if seconds > 0 else 0.0
    return f"{what} = {ms:10.2f} ms / {tokens:5d} tokens ({per_token:8.2f} ms per token, {rate:8.2f} tokens per second)"
