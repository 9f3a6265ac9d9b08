"""The simulator's OpenAI-compatible HTTP server (aiohttp), startup sequence and shutdown, as vLLM 0.32 does them,
or as llama.cpp's llama-server does (engine ``llama_cpp``: sim/llamacpp.py)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import random
import signal
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import hdrs, web

from llmtriage import __version__
from llmtriage.capacity import GpuSpec, ModelSpec
from llmtriage.capacity.gpu import find_gpu
from llmtriage.sim import text
from llmtriage.sim.engine import Engine, SimRequest, TokenStream
from llmtriage.sim.faults import Fault
from llmtriage.sim.llamacpp import LOADING_BODY, LlamaCppPersonality, LlamaLog, context_error
from llmtriage.sim.memory import VLLM_SITE, VLLM_VERSION, EngineArgs, MemoryPlan, plan
from llmtriage.sim.metrics import SimMetrics
from llmtriage.sim.vlog import VllmLog

SM_CLOCK_MAX_MHZ = 1980.0
DEFAULT_TDP_W = 400.0
IDLE_POWER_SHARE = 0.1
IDLE_TEMPERATURE_C = 32.0
BUSY_TEMPERATURE_RISE_C = 40.0
# The kernel caps it at net.core.somaxconn. A burst of connects beyond the accept queue is dropped: those clients
# retry seconds later or are reset. aiohttp's SockSite listens again with its own backlog (128 unless told), so it is
# passed there too.
LISTEN_BACKLOG = 65535
# Past this much unsent output to one client, its tokens wait for a later write (aiohttp's own drain threshold).
WRITE_BUFFER_LIMIT_BYTES = 0x10000


@dataclass(slots=True)
class SimConfig:
    """Everything `llmtriage sim` was asked for."""

    model: ModelSpec
    gpu: GpuSpec
    args: EngineArgs
    served_model_name: str
    host: str = "127.0.0.1"
    port: int = 8000
    speed: float = 1.0
    faults: list[Fault] = field(default_factory=list)
    seed: int = 0
    eos_probability: float = 0.0
    log_file: Path | None = None
    echo: bool = True
    startup_seconds: float = 20.0
    exit_after_death_s: float = 2.0
    non_default_args: dict[str, Any] = field(default_factory=dict)
    engine: str = "vllm"  # or llama_cpp
    ctx_size: int = 4096  # llama_cpp: -c
    parallel: int = 4  # llama_cpp: --parallel (slots)
    kv_unified: bool = True  # llama_cpp: every slot may use all of -c (its default without --parallel)


def _error_body(message: str, kind: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class BadRequest(Exception):
    """A request vLLM would answer with an OpenAI-style error."""

    def __init__(
        self,
        message: str,
        kind: str = "BadRequestError",
        code: int = 400,
        param: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.body = body or _error_body(message, kind, code, param)
        self.code = code


class SseTokens:
    """A request's streamed token events, byte for byte as vLLM's OpenAI server writes them, from pre-encoded parts:
    each event is ``data: {head},"choices":[{"index":0,"text":`` (or chat's ``"delta":{"content":``), the token as a
    JSON string, and the rest of the choice."""

    __slots__ = ("chat", "prefix", "seed")

    def __init__(self, head: str, seed: int, chat: bool) -> None:
        opening = '"delta":{"content":' if chat else '"text":'
        self.prefix = f'data: {head},"choices":[{{"index":0,{opening}'.encode()
        self.seed = seed
        self.chat = chat

    def tokens(self, start: int, stop: int, finish_reason: str | None = None) -> bytes:
        """The events of tokens ``start`` to ``stop - 1``; with ``finish_reason``, the last one carries it."""
        if start >= stop:
            return b""
        endings = _CHAT_ENDINGS if self.chat else _COMPLETION_ENDINGS
        if finish_reason is None:
            return self.prefix + self.prefix.join(text.pick(endings, self.seed, start, stop))
        (piece,) = text.pick(text.TOKENS_JSON, self.seed, stop - 1, stop)
        last = (piece + _ending(self.chat, f'"{finish_reason}"')).encode()
        return self.prefix + self.prefix.join([*text.pick(endings, self.seed, start, stop - 1), last])


def _ending(chat: bool, finish_reason: str) -> str:
    """What follows a token's text in its event, with ``finish_reason`` as JSON (``null`` or a quoted string)."""
    if chat:
        return f'}},"logprobs":null,"finish_reason":{finish_reason}}}]}}\n\n'
    return f',"logprobs":null,"finish_reason":{finish_reason},"stop_reason":null}}]}}\n\n'


_CHAT_ENDINGS = tuple((piece + _ending(True, "null")).encode() for piece in text.TOKENS_JSON)
_COMPLETION_ENDINGS = tuple((piece + _ending(False, "null")).encode() for piece in text.TOKENS_JSON)


def raise_open_files_limit() -> None:
    """The soft open-files limit up to the hard one: every open stream holds a socket."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        # An unlimited hard limit is more than the kernel lets a process have: then the soft one stays.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class SimServer:
    """One simulated vLLM server."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.llama: LlamaCppPersonality | None = None
        if config.engine == "llama_cpp":
            self.log = VllmLog(None, echo=False)  # llama-server prints none of vLLM's lines
            self.llama = LlamaCppPersonality(
                LlamaLog(config.log_file, config.echo),
                model_path=config.model.name,
                n_ctx=config.ctx_size,
                parallel=config.parallel,
                kv_unified=config.kv_unified,
                host=config.host,
                port=config.port,
            )
        else:
            self.log = VllmLog(config.log_file, config.echo)
        other = sum(f.number("memory_gib", 8.0) for f in config.faults if f.name == "other-process" and f.onset_s == 0)
        self.memory: MemoryPlan = plan(config.model, config.gpu, config.args, other)
        self.metrics = SimMetrics(config.served_model_name, self.memory.max_model_len, self._cache_config())
        self.engine: Engine | None = None
        self.rng = random.Random(config.seed)
        self.created = int(time.time())
        self.stopped = asyncio.Event()
        self.exit_code = 0

    def _cache_config(self) -> dict[str, str]:
        args = self.config.args
        fit = self.memory.fit
        return {
            "block_size": str(fit.block_size),
            "cache_dtype": args.kv_cache_dtype,
            "enable_prefix_caching": str(args.enable_prefix_caching),
            "engine": "0",
            "gpu_memory_utilization": str(args.gpu_memory_utilization),
            "is_attention_free": "False",
            "kv_cache_max_concurrency": f"{fit.max_concurrency:.1f}",
            "kv_cache_size_tokens": str(fit.kv_tokens),
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(fit.num_gpu_blocks),
            "num_gpu_blocks_override": "None",
            "sliding_window": "None",
        }

    # ------------------------------------------------------------ startup

    def _banner(self) -> None:
        cfg = self.config
        log = self.log
        for line in (
            "",
            "       █     █     █▄   ▄█",
            f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {VLLM_VERSION}",
            f"  █▄█▀ █     █     █     █  model   {cfg.model.name}",
            "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
            "",
        ):
            log.api(line, where="api_utils.py:347")
        log.api(f"non-default args: {cfg.non_default_args!r}", where="api_utils.py:286")
        log.api(f"Resolved architecture: {cfg.model.architecture}", where="model.py:733")
        log.api(f"Using max model len {self.memory.max_model_len}", where="model.py:2152")

    async def startup(self) -> bool:
        """Print vLLM's startup, apply its memory checks; False (and an exit code) when it would not start."""
        cfg = self.config
        log = self.log
        if self.llama is not None:
            await asyncio.sleep(cfg.startup_seconds / cfg.speed)
            self.llama.startup()
            return True
        self._banner()
        if self.memory.error == "max_model_len_exceeds_model":
            self._config_failure()
            return False
        log.engine(
            f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: model='{cfg.model.name}', "
            f"speculative_config=None, tokenizer='{cfg.model.name}', dtype=torch.bfloat16, "
            f"max_seq_len={self.memory.max_model_len}, tensor_parallel_size=1, pipeline_parallel_size=1, "
            f"kv_cache_dtype={cfg.args.kv_cache_dtype}, enforce_eager={cfg.args.enforce_eager}, "
            f"enable_prefix_caching={cfg.args.enable_prefix_caching}, "
            f"enable_chunked_prefill={cfg.args.enable_chunked_prefill}",
            where="core.py:133",
        )
        log.worker(
            "world_size=1 rank=0 local_rank=0 distributed_init_method=tcp://127.0.0.1:41873 backend=nccl",
            where="parallel_state.py:1906",
        )
        mem = self.memory.fit
        phase = cfg.startup_seconds / cfg.speed / 4
        log.worker(f"Starting to load model {cfg.model.name}...", where="gpu_model_runner.py:2602")
        if mem.error == "free_memory_less_than_requested":
            self._engine_failure(self.memory.error_message or "", "gpu_worker.py", "init_device", "ValueError")
            return False
        await asyncio.sleep(phase)
        load_s = max(1.0, mem.weights_gib / 2.0)
        log.worker(f"Loading weights took {load_s:.2f} seconds", where="default_loader.py:501")
        log.worker(
            f"Model loading took {mem.weights_gib:.4f} GiB memory and {load_s + 1.2:.6f} seconds",
            where="gpu_model_runner.py:2633",
        )
        await asyncio.sleep(phase)
        log.worker(f"Available KV cache memory: {mem.available_kv_gib:.2f} GiB", where="gpu_worker.py:375")
        if mem.error is not None:
            self._engine_failure(
                self.memory.error_message or "", "kv_cache_utils.py", "_check_enough_kv_cache_memory", "ValueError"
            )
            return False
        log.engine(f"GPU KV cache size: {mem.kv_tokens:,} tokens", where="kv_cache_utils.py:2327")
        log.engine(
            f"Maximum concurrency for {mem.max_model_len:,} tokens per request: {mem.max_concurrency:.2f}x",
            where="kv_cache_utils.py:2327",
        )
        if not cfg.args.enforce_eager:
            log.worker(
                "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 67 sizes", where="gpu_model_runner.py:4024"
            )
            await asyncio.sleep(phase)
            log.worker(
                f"Graph capturing finished in 6 secs, took {mem.cuda_graph_gib:.2f} GiB",
                where="gpu_model_runner.py:4110",
            )
        log.engine(
            f"init engine (profile, create kv cache, warmup model) took {cfg.startup_seconds:.2f} seconds",
            where="core.py:402",
        )
        return True

    def _config_failure(self) -> None:
        """vLLM raises ModelConfig validation errors in the API server, before any engine starts."""
        log = self.log
        message = self.memory.error_message or ""
        for line in (
            "Traceback (most recent call last):",
            f'  File "{VLLM_SITE}/engine/arg_utils.py", line 1955, in create_model_config',
            "    return ModelConfig(",
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
            f"  Value error, {message} [type=value_error, input_value=ArgsKwargs((), {{...}}), input_type=ArgsKwargs]",
        ):
            log.raw(line)
        self.exit_code = 1

    def _engine_failure(self, message: str, module: str, function: str, exc: str) -> None:
        """The EngineCore dies during startup: its traceback, then the API server's wrapper error."""
        log = self.log
        log.engine("EngineCore failed to start.", where="core.py:1510", level="ERROR")
        log.traceback(
            "EngineCore",
            "core.py:1510",
            [
                (
                    f"{VLLM_SITE}/v1/engine/core.py",
                    1482,
                    "run_engine_core",
                    "engine_core = EngineCoreProc(*args, **kwargs)",
                ),
                (
                    f"{VLLM_SITE}/v1/engine/core.py",
                    157,
                    "__init__",
                    "kv_cache_config = self._initialize_kv_caches(vllm_config)",
                ),
                (f"{VLLM_SITE}/v1/{module}", 1030, function, f"raise {exc}("),
            ],
            f"{exc}: {message}",
        )
        log.raw("Traceback (most recent call last):")
        log.raw(f'  File "{VLLM_SITE}/v1/engine/utils.py", line 1431, in wait_for_engine_startup')
        log.raw("    raise RuntimeError(")
        log.raw("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
        self.exit_code = 1

    # ------------------------------------------------------------ requests

    def _validate_llama(self, body: dict[str, Any], prompt_tokens: int, llama: LlamaCppPersonality) -> int:
        """llama-server's checks: any model name is served; a prompt over the slot's context is a 400; generation
        stops at the slot's context."""
        n_ctx = llama.n_ctx_slot
        if prompt_tokens > n_ctx:
            message, error = context_error(prompt_tokens, n_ctx)
            llama.rejected(message)
            raise BadRequest(message, body=error)
        requested = body.get("max_tokens", body.get("n_predict"))
        if requested is not None and (isinstance(requested, bool) or not isinstance(requested, int)):
            raise BadRequest(f"max_tokens must be an integer, got {requested!r}.", param="max_tokens")
        room = max(1, n_ctx - prompt_tokens)
        return room if requested is None or requested < 0 else max(1, min(requested, room))

    def _validate(self, body: dict[str, Any], prompt_tokens: int) -> int:
        """vLLM 0.32's checks: the model name, the context limit, max_tokens; returns the max_tokens to use."""
        if self.llama is not None:
            return self._validate_llama(body, prompt_tokens, self.llama)
        name = body.get("model")
        if name is not None and name != self.config.served_model_name:
            raise BadRequest(
                f"The model `{name}` does not exist. Valid aliases: {self.config.served_model_name}.",
                "NotFoundError",
                404,
                "model",
            )
        if body.get("n", 1) != 1:
            raise BadRequest("The simulator serves n=1 only.", param="n")
        limit = self.memory.max_model_len
        if prompt_tokens > limit:
            shown = min(prompt_tokens, limit + 1)
            raise BadRequest(
                f"This model's maximum context length is {limit} tokens. However, your prompt contains at least "
                f"{shown} input tokens, which exceeds this limit even without any output tokens. Please reduce the "
                f"length of the input prompt. (parameter=input_tokens, value={shown})",
                param="input_tokens",
            )
        requested = body.get("max_tokens", body.get("max_completion_tokens"))
        if requested is not None and (isinstance(requested, bool) or not isinstance(requested, int)):
            raise BadRequest(f"max_tokens must be an integer, got {requested!r}.", param="max_tokens")
        max_tokens = limit - prompt_tokens if requested is None else min(requested, limit - prompt_tokens)
        if max_tokens < 1:
            raise BadRequest(
                f"max_tokens must be at least 1, got {max_tokens}. (parameter=max_tokens, value={max_tokens})",
                param="max_tokens",
            )
        return max_tokens

    def _stop_after(self, max_tokens: int, ignore_eos: bool) -> int | None:
        p = self.config.eos_probability
        if ignore_eos or p <= 0:
            return None
        # The first EOS of a geometric draw, as random weights rarely but sometimes emit one.
        draw = 1 + int(self.rng.expovariate(p)) if p < 1 else 1
        return draw if draw < max_tokens else None

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        engine = self.engine
        if engine is None or engine.dead is not None:
            reason = engine.dead if engine is not None else "The engine is not running."
            return web.json_response(_error_body(reason or "", "InternalServerError", 500), status=500)
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            # vLLM answers 400 to a body it cannot parse, deeply nested JSON included.
            return web.json_response(_error_body("Invalid JSON in request body.", "BadRequestError", 400), status=400)
        if not isinstance(body, dict):
            return web.json_response(
                _error_body("The request body must be a JSON object.", "BadRequestError", 400), status=400
            )
        try:
            prompt_text, prompt_tokens = self._prompt(body, chat)
            max_tokens = self._validate(body, prompt_tokens)
            include_usage = self._include_usage(body)
        except BadRequest as e:
            return web.json_response(e.body, status=e.code)
        known = {"model", "prompt", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options",
                 "ignore_eos", "temperature", "top_p", "top_k", "n", "seed", "stop", "presence_penalty",
                 "frequency_penalty", "logprobs", "user", "min_tokens"}  # fmt: skip
        ignored = set(body) - known
        if ignored:
            self.log.api(
                f"The following fields were present in the request but ignored: {ignored}",
                where="protocol.py:51",
                level="WARNING",
            )
        stream = TokenStream()
        seed = self.rng.randrange(1 << 30)
        req = SimRequest(
            request_id=("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:16],
            prompt_tokens=prompt_tokens,
            block_hashes=text.block_hashes(prompt_text, prompt_tokens, self.memory.block_size),
            max_tokens=max_tokens,
            stop_after=self._stop_after(max_tokens, bool(body.get("ignore_eos"))),
            stream=stream,
        )
        engine.add(req)
        try:
            if body.get("stream"):
                return await self._stream(request, req, seed, chat, include_usage)
            return await self._complete(req, seed, chat)
        finally:
            if req.finish_reason is None:
                engine.abort(req)

    @staticmethod
    def _include_usage(body: dict[str, Any]) -> bool:
        """stream_options must be an object (vLLM's pydantic model answers 400 otherwise)."""
        options = body.get("stream_options")
        if options is None:
            return False
        if not isinstance(options, dict):
            raise BadRequest("stream_options must be an object.", param="stream_options")
        return bool(options.get("include_usage"))

    def _prompt(self, body: dict[str, Any], chat: bool) -> tuple[str, int]:
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
                raise BadRequest("messages must be a non-empty list of objects.", param="messages")
            return text.render_chat_prompt(messages)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return " ".join(map(str, prompt)), len(prompt)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise BadRequest("prompt must be a non-empty string or a list of token ids.", param="prompt")
        return prompt, text.count_prompt_tokens(prompt)

    def _usage(self, req: SimRequest) -> dict[str, int]:
        return {
            "prompt_tokens": req.prompt_tokens,
            "total_tokens": req.prompt_tokens + req.output,
            "completion_tokens": req.output,
        }

    async def _complete(self, req: SimRequest, seed: int, chat: bool) -> web.Response:
        stream = req.stream
        await stream.event.wait()
        if stream.error is not None:
            return web.json_response(_error_body(stream.error, "InternalServerError", 500), status=500)
        content = "".join(text.pick(text.TOKENS, seed, 0, stream.produced))
        choice: dict[str, Any] = {
            "index": 0,
            "logprobs": None,
            "finish_reason": stream.finish_reason,
            "stop_reason": None,
        }
        if chat:
            choice["message"] = {"role": "assistant", "content": content, "refusal": None, "tool_calls": []}
        else:
            choice["text"] = content
        return web.json_response(
            {
                "id": req.request_id,
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()),
                "model": self.config.served_model_name,
                "choices": [choice],
                "usage": self._usage(req),
                "system_fingerprint": f"vllm-{VLLM_VERSION}-sim",
            }
        )

    async def _stream(
        self, request: web.Request, req: SimRequest, seed: int, chat: bool, include_usage: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        head = json.dumps(
            {
                "id": req.request_id,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()),
                "model": self.config.served_model_name,
            },
            separators=(",", ":"),
        )[:-1]
        if chat:
            await response.write(
                f'data: {head},"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}]}}\n\n'.encode()
            )
        events = SseTokens(head, seed, chat)
        stream = req.stream
        transport = request.transport
        # HTTP/1.1 gets chunked transfer encoding; an HTTP/1.0 client reads until the connection closes.
        chunked = response.headers.get(hdrs.TRANSFER_ENCODING) == "chunked"
        sent = 0

        def on_tokens() -> None:
            # The headers went out in prepare(), so what is written straight to the socket follows them in order.
            nonlocal sent
            if transport is None or transport.is_closing():
                stream.event.set()  # the client went away: wake the handler to abort the request
                return
            produced = stream.produced
            if produced > sent and transport.get_write_buffer_size() <= WRITE_BUFFER_LIMIT_BYTES:
                body = events.tokens(sent, produced)
                transport.write(b"%x\r\n%b\r\n" % (len(body), body) if chunked else body)
                sent = produced

        stream.on_tokens = on_tokens
        try:
            await stream.event.wait()
        finally:
            stream.on_tokens = None
        if stream.error is not None:
            tail = f"data: {json.dumps(_error_body(stream.error, 'InternalServerError', 500))}\n\n".encode()
        elif stream.finish_reason is None:
            return response  # the client went away; the caller aborts the request
        else:
            tail = events.tokens(sent, stream.produced, stream.finish_reason)
            if include_usage:
                usage = json.dumps(self._usage(req), separators=(",", ":"))
                tail += f'data: {head},"choices":[],"usage":{usage}}}\n\n'.encode()
            tail += b"data: [DONE]\n\n"
        try:
            await response.write(tail)
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client left as its last tokens went out: nothing is held for it any more
        return response

    # ------------------------------------------------------------ other endpoints

    async def models(self, request: web.Request) -> web.Response:
        """GET /v1/models."""
        name = self.config.served_model_name
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "vllm",
                        "root": self.config.model.name,
                        "parent": None,
                        "max_model_len": self.memory.max_model_len,
                    }
                ],
            }
        )

    async def health(self, request: web.Request) -> web.Response:
        """GET /health: 200 while the engine lives (a stalled engine too), 503 once it died; llama-server's JSON."""
        alive = self.engine is not None and self.engine.dead is None
        if self.llama is not None:
            return web.json_response({"status": "ok"} if alive else LOADING_BODY, status=200 if alive else 503)
        return web.Response(status=200 if alive else 503)

    async def slots(self, request: web.Request) -> web.Response:
        """GET /slots (llama_cpp)."""
        assert self.llama is not None
        return web.json_response(self.llama.slots_json())

    async def version(self, request: web.Request) -> web.Response:
        """GET /version."""
        return web.json_response({"version": VLLM_VERSION})

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        """GET /metrics."""
        if self.llama is not None:
            return web.Response(text=self.llama.metrics_text(), content_type="text/plain", charset="utf-8")
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def gpu_telemetry(self, request: web.Request) -> web.Response:
        """GET /llmtriage/gpu: NVML-like readings (docs/gpu-telemetry.md)."""
        return web.json_response(self.telemetry())

    def telemetry(self) -> dict[str, Any]:
        """The GPU as NVML would describe it now."""
        engine = self.engine
        gpu = self.config.gpu
        info = find_gpu(gpu.name)
        tdp_w = info.tdp_w if info is not None and info.tdp_w else DEFAULT_TDP_W
        smi_name = info.aliases[0] if info is not None and info.aliases else gpu.name
        mem = self.memory.fit
        busy = engine.busy_ratio() if engine is not None else 0.0
        state = engine.gpu if engine is not None else None
        clock_ratio = state.clock_ratio if state else 1.0
        other_gib = state.other_process_gib if state else self.memory.other_process_gib
        limit_w = tdp_w * (0.6 if state and state.throttle_kind == "power" else 1.0)
        power = min(limit_w, tdp_w * (IDLE_POWER_SHARE + (1 - IDLE_POWER_SHARE) * busy))
        if state and state.throttle_kind == "power" and busy > 0.2:
            power = limit_w
        temperature = IDLE_TEMPERATURE_C + BUSY_TEMPERATURE_RISE_C * busy
        if state and state.throttle_kind == "thermal":
            temperature = 92.0
        mask = (state.reasons_mask if state else 0) | (0x1 if busy < 0.05 else 0)
        used_gib = (mem.budget_gib if engine is not None else 0.0) + other_gib
        processes = []
        if engine is not None:
            processes.append(
                {
                    "pid": self.log.engine_pid,
                    "name": "VLLM::EngineCore",
                    "used_memory_bytes": int(mem.budget_gib * 2**30),
                }
            )
        if other_gib:
            processes.append(
                {"pid": self.log.engine_pid + 1000, "name": "python3", "used_memory_bytes": int(other_gib * 2**30)}
            )
        return {
            "schema_version": 1,
            "driver_version": f"sim-{__version__}",
            "cuda_version": None,
            "timestamp_s": time.time(),
            "gpus": [
                {
                    "index": 0,
                    "uuid": "GPU-00000000-0000-0000-0000-000000000000",
                    "name": smi_name,
                    "memory_total_bytes": int(mem.gpu_total_gib * 2**30),
                    "memory_used_bytes": int(used_gib * 2**30),
                    "utilization_gpu_pct": round(100.0 * busy, 1),
                    "power_draw_w": round(power, 1),
                    "power_limit_w": round(limit_w, 1),
                    "temperature_c": round(temperature, 1),
                    "sm_clock_mhz": round(SM_CLOCK_MAX_MHZ * clock_ratio if busy > 0.05 else 345.0, 1),
                    "sm_clock_max_mhz": SM_CLOCK_MAX_MHZ,
                    "pstate": "P0" if busy > 0.05 else "P8",
                    "clocks_event_reasons_mask": mask,
                    "processes": processes,
                }
            ],
        }

    # ------------------------------------------------------------ the app

    @web.middleware
    async def _observe(self, request: web.Request, handler: Any) -> web.StreamResponse:
        start = time.monotonic()
        status = 500
        response: web.StreamResponse | None = None
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            if self.log.enabled:
                peer = request.transport.get_extra_info("peername") if request.transport else None
                where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "127.0.0.1:0"
                self.log.access(where, request.method, request.path_qs, status)
            route = request.match_info.route.resource
            handler_name = route.canonical if route is not None else request.path
            if handler_name.startswith("/v1/"):
                size = response.content_length if response is not None and response.content_length else 0
                self.metrics.observe_http(
                    handler_name, request.method, status, time.monotonic() - start, request.content_length or 0, size
                )

    def app(self) -> web.Application:
        """The aiohttp application."""
        application = web.Application(middlewares=[self._observe], client_max_size=64 * 2**20)
        application.router.add_post("/v1/completions", lambda r: self._generate(r, chat=False))
        application.router.add_post("/v1/chat/completions", lambda r: self._generate(r, chat=True))
        application.router.add_get("/v1/models", self.models)
        application.router.add_get("/health", self.health)
        application.router.add_get("/version", self.version)
        application.router.add_get("/metrics", self.metrics_endpoint)
        application.router.add_get("/llmtriage/gpu", self.gpu_telemetry)
        if self.llama is not None:
            application.router.add_get("/slots", self.slots)
        return application

    def _bind(self) -> socket.socket | None:
        cfg = self.config
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((cfg.host, cfg.port))
        except OSError as e:
            sock.close()
            if self.llama is not None:
                self.llama.bind_failed()
            elif e.errno == errno.EADDRINUSE:
                self.log.raw("Traceback (most recent call last):")
                self.log.raw(f'  File "{VLLM_SITE}/entrypoints/launchers/api_server/entry.py", line 171, in run_server')
                self.log.raw("    sock = create_server_socket(listen_address)")
                self.log.raw("OSError: [Errno 98] Address already in use")
            else:
                self.log.raw(f"OSError: [Errno {e.errno}] {e.strerror}")
            self.exit_code = 1
            return None
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
        return sock

    async def serve(self) -> int:
        """Start, serve until stopped (SIGINT/SIGTERM) or the engine dies; return the process exit code."""
        cfg = self.config
        raise_open_files_limit()
        sock = self._bind()
        if sock is None:
            return self.exit_code
        if not await self.startup():
            sock.close()
            return self.exit_code
        self.engine = Engine(cfg.model, cfg.gpu, cfg.args, self.memory, cfg.faults, self.metrics, self.log, cfg.speed)
        self.engine.observer = self.llama
        died = asyncio.Event()
        self.engine.on_death.append(died)
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.SockSite(runner, sock, backlog=LISTEN_BACKLOG)
        await site.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stopped.set)
        tasks = [asyncio.create_task(self.engine.run()), asyncio.create_task(self.engine.log_stats())]
        self.log.api(f"Starting vLLM server on http://{cfg.host}:{cfg.port}", where="entry.py:140")
        self.log.raw(f"INFO:     Started server process [{self.log.api_pid}]")
        self.log.raw("INFO:     Waiting for application startup.")
        self.log.raw("INFO:     Application startup complete.")
        stop = asyncio.create_task(self.stopped.wait())
        death = asyncio.create_task(died.wait())
        await asyncio.wait([stop, death], return_when=asyncio.FIRST_COMPLETED)
        if died.is_set() and not self.stopped.is_set():
            await asyncio.sleep(cfg.exit_after_death_s)
            self.exit_code = 1
        else:
            self.log.api("[shutdown] API server: shutdown triggered", where="launcher.py:254")
            self.engine.kill("The server is shutting down.")
        self.log.raw("INFO:     Shutting down")
        self.log.raw("INFO:     Waiting for application shutdown.")
        self.log.raw("INFO:     Application shutdown complete.")
        self.log.raw(f"INFO:     Finished server process [{self.log.api_pid}]")
        for task in (*tasks, stop, death):
            task.cancel()
        await runner.cleanup()
        self.log.close()
        if self.llama is not None:
            self.llama.shutdown()
            self.llama.log.close()
        return self.exit_code
