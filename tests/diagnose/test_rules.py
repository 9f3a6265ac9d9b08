"""Every comparison a cause rule makes, tested on both sides of its threshold: a rule that inverts one fails here.

The numbers sit just inside and just outside the thresholds of catalog/thresholds.yaml (read, not copied), so a
changed threshold moves the test with it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtriage import catalog
from llmtriage.diagnose import questions
from llmtriage.diagnose.rules import latency, runtime, startup
from llmtriage.diagnose.rules.signatures import unrecognized

from .scenes import INF, prom, scene, signals

T = catalog.thresholds()
PREEMPTIONS = "vllm:num_preemptions_total"
KV_USAGE = "vllm:kv_cache_usage_perc"
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"


def _two(before: dict[str, float], after: dict[str, float]) -> list[str]:
    """Two scrapes (30 s apart once laid out): counters in ``before``, then in ``after``."""
    return [prom(counters=before), prom(counters=after)]


# ---------------------------------------------------------------- KV pressure (slow generation, slow TTFT)


@pytest.mark.parametrize(("grew", "named"), [(0, False), (4, True)])
def test_kv_pressure_counts_preemptions_only_when_they_grew(tmp_path: Path, grew: int, named: bool) -> None:
    found = scene(tmp_path, scrapes=_two({PREEMPTIONS: 10}, {PREEMPTIONS: 10 + grew}))
    notes = [n for _, _, n in signals(latency.kv_pressure, found)]
    assert any("preemptions" in n for n in notes) is named, notes


@pytest.mark.parametrize(("usage", "named"), [(T.kv_usage_high - 0.05, False), (T.kv_usage_high + 0.05, True)])
def test_kv_pressure_needs_the_cache_nearly_full(tmp_path: Path, usage: float, named: bool) -> None:
    found = scene(tmp_path, scrapes=[prom(gauges={KV_USAGE: usage})])
    notes = [n for _, _, n in signals(latency.kv_pressure, found)]
    assert any("KV cache usage reached" in n for n in notes) is named, notes


@pytest.mark.parametrize(("usage", "named"), [(0.5, False), (T.kv_usage_high + 0.02, True)])
def test_requests_waiting_are_kv_pressure_only_when_the_cache_is_full(
    tmp_path: Path, usage: float, named: bool
) -> None:
    log = (
        "INFO 01-01 00:00:10 [loggers.py:1] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
        f"throughput: 20.0 tokens/s, Running: 4 reqs, Waiting: 6 reqs, GPU KV cache usage: {usage * 100:.1f}%\n"
    )
    notes = [n for _, _, n in signals(latency.kv_pressure, scene(tmp_path, log=log))]
    assert any("requests waiting while the KV cache" in n for n in notes) is named, notes


# ---------------------------------------------------------------- queueing and prefill (slow TTFT)


@pytest.mark.parametrize(
    ("waiting", "weight"), [(0, None), (1, 0.2), (T.waiting_queue - 1, 0.2), (T.waiting_queue, 0.4)]
)
def test_queueing_weighs_the_queue_by_its_length(tmp_path: Path, waiting: float, weight: float | None) -> None:
    found = signals(latency.queueing, scene(tmp_path, scrapes=[prom(gauges={WAITING: waiting})]))
    assert [w for _, w, _ in found] == ([] if weight is None else [weight])


@pytest.mark.parametrize(("queue_s", "named"), [(0.2, False), (0.8, True)])
def test_queue_time_dominating_ttft_is_queueing(tmp_path: Path, queue_s: float, named: bool) -> None:
    # Ten requests: TTFT sums to 10 s (mean 1 s); queue time sums to the share asked for, on either side of it.
    text = prom(histograms={"vllm:time_to_first_token_seconds": {1.0: 0, 2.0: 10, INF: 10}})
    queue = prom(histograms={"vllm:request_queue_time_seconds": {0.5: 0, 1.0: 10, INF: 10}}).replace(
        'vllm:request_queue_time_seconds_sum{model_name="m"} 10',
        f'vllm:request_queue_time_seconds_sum{{model_name="m"}} {queue_s * 10 / T.queue_share}',
    )
    notes = [n for _, _, n in signals(latency.queueing, scene(tmp_path, scrapes=[text + queue]))]
    assert any("of the mean TTFT" in n for n in notes) is named, notes


@pytest.mark.parametrize(("rate", "named"), [(10.0, False), (10.0 * T.overload_factor + 1, True)])
def test_offered_above_served_is_queueing(tmp_path: Path, rate: float, named: bool) -> None:
    log = (
        f"python benchmark_serving.py --model m --request-rate {rate:g}\n"
        "Request throughput (req/s):              10.00\n"
    )
    notes = [n for _, _, n in signals(latency.queueing, scene(tmp_path, log=log))]
    assert any(n.startswith("offered") for n in notes) is named, notes


def _prompt_histogram(median: float, tail: float) -> str:
    """A prompt-length histogram with 50% of requests at ``median`` tokens and 2% at ``tail``."""
    return prom(histograms={"vllm:request_prompt_tokens": {median: 60, tail / 2: 97, tail: 100, INF: 100}})


@pytest.mark.parametrize(("tail", "named"), [(1_000, False), (T.long_prompt_tokens * 2, True)])
def test_long_prompts_among_short_ones_jam_prefill(tmp_path: Path, tail: float, named: bool) -> None:
    found = scene(tmp_path, scrapes=[_prompt_histogram(100, tail)])
    notes = [n for _, _, n in signals(latency.prefill_jam, found)]
    assert any("long prompts among short ones" in n for n in notes) is named, notes


@pytest.mark.parametrize(("ktokens", "named"), [(8, False), (T.very_long_prompt_tokens / 1000 + 10, True)])
def test_very_long_prompts_stated_in_a_report_jam_prefill(tmp_path: Path, ktokens: float, named: bool) -> None:
    log = f"We saw a {ktokens:g}K-token prompt hold every other request.\n"
    notes = [n for _, _, n in signals(latency.prefill_jam, scene(tmp_path, log=log))]
    assert any("tokens in flight" in n for n in notes) is named, notes


@pytest.mark.parametrize(("flag", "named"), [("--enable-prefix-caching", False), ("--no-enable-prefix-caching", True)])
def test_prefix_caching_off_with_long_prompts(tmp_path: Path, flag: str, named: bool) -> None:
    text = prom(histograms={"vllm:request_prompt_tokens": {2000: 10, INF: 10}}).replace(
        'vllm:request_prompt_tokens_sum{model_name="m"} 10', 'vllm:request_prompt_tokens_sum{model_name="m"} 20000'
    )
    found = scene(tmp_path, scrapes=[text], launch=f"vllm serve m {flag}")
    assert bool(signals(latency.prefix_reuse, found)) is named


@pytest.mark.parametrize(("running", "named"), [(10, False), (30, True)])
def test_more_in_flight_than_the_kv_pool_holds(tmp_path: Path, running: float, named: bool) -> None:
    log = "INFO [kv_cache_utils.py:1] Maximum concurrency for 4,096 tokens per request: 8.00x\n"
    found = scene(tmp_path, log=log, scrapes=[prom(gauges={RUNNING: running, WAITING: 0})])
    assert bool(signals(latency.kv_pool_small, found)) is named


# ---------------------------------------------------------------- runtime OOM


@pytest.mark.parametrize(("running", "named"), [(T.crash_running - 1, False), (T.crash_running, True)])
def test_many_running_at_the_crash_is_concurrency(tmp_path: Path, running: int, named: bool) -> None:
    log = (
        "ERROR [core.py:1] Dumping scheduler stats: SchedulerStats(num_running_reqs="
        f"{running}, num_waiting_reqs=0, kv_cache_usage=0.5)\n"
    )
    notes = [n for _, _, n in signals(runtime.concurrency_at_crash, scene(tmp_path, log=log))]
    assert any("running when the engine died" in n for n in notes) is named, notes


@pytest.mark.parametrize(
    ("reserved", "tried", "named"),
    [
        (T.fragmentation_floor_gib / 2, 0.1, False),  # a little cached memory: not fragmentation
        (T.fragmentation_floor_gib + 0.1, 0.4, True),  # large against the request, above the floor
        (T.fragmentation_gib + 0.5, 8.0, True),  # large in absolute terms
        (0.5, 8.0, False),  # small against a big request
    ],
)
def test_fragmentation_needs_reserved_memory_large_against_the_request(
    tmp_path: Path, reserved: float, tried: float, named: bool
) -> None:
    log = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2f} GiB. GPU 0 has a total capacity"
        f" of 79.10 GiB of which 100.00 MiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and"
        f" {reserved:.2f} GiB is reserved by PyTorch but unallocated.\n"
    )
    assert bool(signals(runtime.fragmentation, scene(tmp_path, log=log))) is named


@pytest.mark.parametrize(("code", "named"), [("1", False), ("-9", True)])
def test_a_worker_killed_by_a_signal(tmp_path: Path, code: str, named: bool) -> None:
    log = f"ERROR [multiproc_executor.py:1] Worker proc VllmWorker-0 died unexpectedly (exit code: {code}), shutting down.\n"
    assert bool(signals(runtime.killed_worker, scene(tmp_path, log=log))) is named


@pytest.mark.parametrize(("util", "named"), [(T.util_elevated - 0.05, False), (T.util_elevated, True)])
def test_a_forward_oom_blames_the_budget_only_when_it_is_high(tmp_path: Path, util: float, named: bool) -> None:
    log = (
        "INFO 01-01 [api_server.py:1] Application startup complete.\n"
        "ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    found = scene(tmp_path, log=log, launch=f"vllm serve m --gpu-memory-utilization {util}")
    assert bool(signals(runtime.forward_oom, found, "gpu_mem_util_too_high")) is named


@pytest.mark.parametrize(
    ("statuses", "weight"), [(["200"] * 10, None), (["503"] * 3 + ["200"] * 7, 0.4), (["503"] * 8, 0.6)]
)
def test_refused_as_busy_is_queueing(tmp_path: Path, statuses: list[str], weight: float | None) -> None:
    log = "".join(f'INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" {s} OK\n' for s in statuses)
    assert [w for _, w, _ in signals(runtime.overload, scene(tmp_path, log=log))] == (
        [] if weight is None else [weight]
    )


# ---------------------------------------------------------------- startup OOM


@pytest.mark.parametrize(("available", "named"), [(0.5, False), (-0.3, True), (0.0, True)])
def test_no_memory_left_for_the_kv_cache(tmp_path: Path, available: float, named: bool) -> None:
    log = f"INFO [gpu_worker.py:1] Available KV cache memory: {available} GiB\n"
    notes = [n for _, _, n in signals(startup.memory_budget, scene(tmp_path, log=log))]
    assert any("memory left for the KV cache" in n for n in notes) is named, notes


@pytest.mark.parametrize(("weights", "named"), [(20.0, False), (23.0, True)])
def test_weights_that_fill_the_gpu(tmp_path: Path, weights: float, named: bool) -> None:
    log = (
        f"INFO Model loading took {weights} GiB and 10 seconds\n"
        "INFO Memory profiling takes 3 seconds: total_gpu_memory (24.00GiB) x gpu_memory_utilization (0.90) = 21.60GiB\n"
    )
    notes = [n for _, _, n in signals(startup.memory_budget, scene(tmp_path, log=log))]
    assert any("the weights alone take" in n for n in notes) is (weights / 24.0 >= T.weights_share_high), notes
    assert any(">= budget" in n for n in notes) is named, notes


@pytest.mark.parametrize(("usage", "named"), [(15.0, False), (19.0, True)])
def test_a_start_that_dies_after_weights_that_fill_the_gpu(tmp_path: Path, usage: float, named: bool) -> None:
    # avail + usage = the GPU; usage / (avail + usage) against weights_share_tight.
    avail = 22.0 - usage
    log = (
        f"[2025-01-01 00:00:00 TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem={avail:.2f} GB,"
        f" mem usage={usage:.2f} GB.\n[2025-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    )
    found = scene(tmp_path, log=log)
    assert (found.weights_left_too_little is not None) is (usage / 22.0 >= T.weights_share_tight)
    assert bool(signals(startup.memory_budget, found, "weights_kv_exceed_memory")) is named


@pytest.mark.parametrize(("capacity", "named"), [(8192, False), (3000, True)])
def test_a_kv_cache_smaller_than_one_request(tmp_path: Path, capacity: int, named: bool) -> None:
    log = f"INFO [kv_cache_utils.py:1] GPU KV cache size: {capacity:,} tokens\n"
    found = scene(tmp_path, log=log, launch="vllm serve m --max-model-len 4096")
    assert bool(signals(startup.kv_capacity, found)) is named


@pytest.mark.parametrize(("util", "weight"), [(T.util_high - 0.01, None), (T.util_high, 0.3)])
def test_a_budget_too_close_to_all_memory(tmp_path: Path, util: float, weight: float | None) -> None:
    found = scene(tmp_path, launch=f"vllm serve m --gpu-memory-utilization {util}")
    assert [w for _, w, _ in signals(startup.utilization_headroom, found)] == ([] if weight is None else [weight])


@pytest.mark.parametrize(
    ("free", "requested", "cause"),
    [
        (21.8, 22.0, "gpu_mem_util_too_high"),  # 0.2 GiB short: the server's own CUDA context
        (15.32, 19.39, "other_process_holds_memory"),  # 4 GiB short with 6.7 GiB in use: a neighbour
    ],
)
def test_a_start_short_of_free_memory_by_the_numbers(tmp_path: Path, free: float, requested: float, cause: str) -> None:
    log = (
        f"ValueError: Free memory on device cuda:0 ({free}/22.04 GiB) on startup is less than desired GPU memory"
        f" utilization (0.9, {requested} GiB). Decrease GPU memory utilization or reduce GPU memory used by other"
        " processes.\n"
    )
    assert [c for c, _, _ in signals(startup.requested_above_memory, scene(tmp_path, log=log))] == [cause]


def test_a_kv_space_above_all_memory_is_the_setting(tmp_path: Path) -> None:
    log = (
        "RuntimeError: Worker failed with error 'Available memory on node 0 (8.96/10.34 GiB) on kv cache allocation"
        " is less than requested memory for kv (100.0 GiB).'\n"
    )
    assert [c for c, _, _ in signals(startup.requested_above_memory, scene(tmp_path, log=log))] == [
        "gpu_mem_util_too_high"
    ]


@pytest.mark.parametrize(
    ("prefix", "holds", "named"),
    [
        ("(EngineCore_DP0 pid=4242) ", "14.26", False),  # the server's own PID
        ("", "21.55", False),  # it holds all the memory in use: the server itself (host PIDs in a container)
        ("", "14.26", True),  # a share of it, next to the server: a neighbour
    ],
)
def test_the_process_an_oom_names_is_a_neighbour_only_when_it_is_not_the_server(
    tmp_path: Path, prefix: str, holds: str, named: bool
) -> None:
    log = (
        f"{prefix}ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total"
        f" capacity of 22.04 GiB of which 471.69 MiB is free. Process 4242 has {holds} GiB memory in use.\n"
    )
    assert bool(signals(startup.other_processes, scene(tmp_path, log=log))) is named


@pytest.mark.parametrize(("util", "weights"), [(0.8, [0.5]), (T.util_elevated, [0.5, 0.2])])
def test_a_start_that_stops_in_graph_capture(tmp_path: Path, util: float, weights: list[float]) -> None:
    log = "INFO [gpu_model_runner.py:1] Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 10%\n"
    found = scene(tmp_path, log=log, launch=f"vllm serve m --gpu-memory-utilization {util}")
    assert [w for _, w, _ in signals(startup.stopped_in_graph_capture, found)] == weights


# ---------------------------------------------------------------- unrecognized errors


@pytest.mark.parametrize(
    ("after", "named"), [("", True), ('INFO: 127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 200 OK\n', False)]
)
def test_an_uncatalogued_exception_is_a_failure_unless_serving_went_on(tmp_path: Path, after: str, named: bool) -> None:
    log = (
        'INFO: 127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 200 OK\nWeirdLibraryError: the frobnicator is out of sync\n'
        + after
    )
    found = scene(tmp_path, log=log)
    assert (found.root is not None) is named
    assert bool(signals(unrecognized, found)) is named


# ---------------------------------------------------------------- the tree's questions


@pytest.mark.parametrize(
    ("log", "answer"),
    [
        ("INFO: Application startup complete.\n", "yes"),
        ('INFO: 127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 400 Bad Request\n', "yes"),
        ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n", "no"),
        ("INFO some chatter that decides nothing\n", "unknown"),
    ],
    ids=["ready", "answered", "fatal", "neither"],
)
def test_is_the_server_up_needs_evidence_either_way(tmp_path: Path, log: str, answer: str) -> None:
    step = questions.server_up(scene(tmp_path, log=log))
    assert step.answer == answer
    assert step.evidence, "every answer cites what decided it"


def _ttft(p95_bucket: float) -> str:
    return prom(histograms={"vllm:time_to_first_token_seconds": {p95_bucket / 2: 0, p95_bucket: 100, INF: 100}})


@pytest.mark.parametrize(("bucket", "answer"), [(T.slo.ttft_p95_s / 2, "no"), (T.slo.ttft_p95_s * 2, "yes")])
def test_slow_ttft_compares_the_p95_with_the_p95_objective(tmp_path: Path, bucket: float, answer: str) -> None:
    assert questions.slow_ttft(scene(tmp_path, scrapes=[_ttft(bucket)])).answer == answer


@pytest.mark.parametrize(("waiting", "answer"), [(T.slo.queue - 1, "no"), (T.slo.queue, "yes")])
def test_a_queue_over_its_objective_is_slow_ttft_whatever_the_ttft(tmp_path: Path, waiting: float, answer: str) -> None:
    text = _ttft(T.slo.ttft_p95_s / 2) + prom(gauges={WAITING: waiting})
    assert questions.slow_ttft(scene(tmp_path, scrapes=[text])).answer == answer


@pytest.mark.parametrize(
    ("block", "answer"),
    [
        ("Median TTFT (ms): 500.0\nP99 TTFT (ms): 9000.0\n", "yes"),  # no p95: the p99 is the tail, said so
        ("Median TTFT (ms): 3000.0\n", "yes"),  # the median over the objective: the p95 is too
        ("Median TTFT (ms): 500.0\n", "no"),
    ],
)
def test_a_load_tests_ttft_against_the_p95_objective(tmp_path: Path, block: str, answer: str) -> None:
    log = "Successful requests: 100\n" + block
    assert questions.slow_ttft(scene(tmp_path, log=log)).answer == answer


@pytest.mark.parametrize(("bad", "answer"), [(0, "no"), (5, "errors (5xx) or timeouts")])
def test_requests_fail_by_the_error_rate_objective(tmp_path: Path, bad: float, answer: str) -> None:
    before = 'http_requests_total{status="2xx",handler="/v1/completions"} 100\n'
    after = f'http_requests_total{{status="2xx",handler="/v1/completions"}} 200\nhttp_requests_total{{status="5xx",handler="/v1/completions"}} {bad}\n'
    head = "# TYPE http_requests_total counter\n"
    found = scene(tmp_path, scrapes=[head + before, head + after])
    assert questions.requests_fail(found).answer == answer


@pytest.mark.parametrize(("done", "stalled"), [("16/16", False), ("0/16", True)])
def test_a_progress_bar_that_ends_at_zero_is_a_stall(tmp_path: Path, done: str, stalled: bool) -> None:
    speed = "0.00" if stalled else "120.00"
    log = (
        "INFO Application startup complete.\n"
        f"Processed prompts: 100%|##########| {done} [00:10<00:00, est. speed input: {speed} toks/s, output: {speed} toks/s]\n"
    )
    assert (questions.tokens_flow(scene(tmp_path, log=log)).answer == "yes") is stalled


@pytest.mark.parametrize(("seq", "answer"), [(12, "no"), (T.serving_collectives * 5, "yes")])
def test_a_collective_timeout_after_thousands_of_collectives_hung_serving(
    tmp_path: Path, seq: int, answer: str
) -> None:
    log = (
        f"[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq},"
        " OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600029 milliseconds before timing out.\n"
    )
    found = scene(tmp_path, log=log)
    assert questions.server_up(found).answer == answer


# ---------------------------------------------------------------- lines from public threads (sources inline)


def _diagnosed(tmp_path: Path, log: str, launch: str | None = None) -> tuple[str, list[str]]:
    from llmtriage.diagnose.engine import diagnose

    result = diagnose(scene(tmp_path, log=log, launch=launch).evidence)
    return result.symptom_class, [c.id for c in result.causes]


def test_a_traceback_cut_before_its_exception_line_is_still_a_failure(tmp_path: Path) -> None:
    # vllm-project/vllm#2418 as pasted: the excerpt stops inside the traceback. KV: 229 blocks x 16 < 4096 tokens.
    log = (
        "INFO 01-11 15:51:02 llm_engine.py:70] Initializing an LLM engine with config: model='/m', dtype=torch.float16,"
        " max_seq_len=4096, download_dir=None, load_format=auto, tensor_parallel_size=1, quantization=None)\n"
        "INFO 01-11 15:51:18 llm_engine.py:275] # GPU blocks: 229, # CPU blocks: 512\n"
        "Traceback (most recent call last):\n"
        '  File "load_llm.py", line 8, in <module>\n'
        "    llm = LLM(model='/m')\n"
    )
    cls, causes = _diagnosed(tmp_path, log)
    assert (cls, causes[0]) == ("startup_oom", "kv_cache_too_small_for_max_model_len")


def test_a_traceback_after_a_stop_is_not_a_failure(tmp_path: Path) -> None:
    log = (
        "INFO:     Application startup complete.\n"
        'INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 200 OK\n'
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.12/asyncio/runners.py", line 118, in run\n'
        "KeyboardInterrupt\n"
    )
    assert _diagnosed(tmp_path, log) == ("healthy", [])


def test_an_error_logged_before_its_traceback_is_placed_by_its_frames(tmp_path: Path) -> None:
    # vllm-project/vllm#9290: V0's engine logs repr(e) first, then the traceback; run_engine_loop is serving.
    log = (
        "ERROR 10-11 12:27:29 engine.py:157] OutOfMemoryError('CUDA out of memory. Tried to allocate 138.00 MiB. GPU 0"
        " has a total capacity of 79.15 GiB of which 2.19 MiB is free.')\n"
        "ERROR 10-11 12:27:29 engine.py:157] Traceback (most recent call last):\n"
        'ERROR 10-11 12:27:29 engine.py:157]   File "/x/vllm/engine/multiprocessing/engine.py", line 218, in run_engine_loop\n'
        "ERROR 10-11 12:27:29 engine.py:157]     request_outputs = self.engine_step()\n"
    )
    assert _diagnosed(tmp_path, log)[0] == "runtime_oom"


def test_a_port_taken_on_windows(tmp_path: Path) -> None:
    # ollama/ollama#4999: Windows reports a port held by a port proxy as 'forbidden by its access permissions'.
    log = (
        "Error: listen tcp 127.0.0.1:11434: bind: An attempt was made to access a socket in a way forbidden by its"
        " access permissions.\n"
    )
    assert _diagnosed(tmp_path, log) == ("startup_failure", ["port_in_use"])


def test_a_context_that_cannot_shift_crashes_a_serving_runner(tmp_path: Path) -> None:
    # ollama/ollama#9171: the context fills while generating; DeepSeek's cache cannot shift; the runner dies.
    log = (
        'time=2025-02-17T11:29:30.763Z level=DEBUG source=cache.go:231 msg="context limit hit - shifting" id=0'
        " limit=2048 input=2048 keep=5 discard=1021\n"
        "llama.cpp:11942: The current context does not support K-shift\n"
        "SIGSEGV: segmentation violation\n"
    )
    assert _diagnosed(tmp_path, log) == ("request_failure", ["prompt_exceeds_max_model_len"])


def test_a_rejection_counts_whatever_the_access_line_says(tmp_path: Path) -> None:
    # QwenLM/qwen-code#371: a llama-server slot refuses an oversized prompt; its access line logged 200.
    log = (
        "srv  log_server_r: request: POST /v1/chat/completions 192.168.2.12 200\n"
        "slot launch_slot_: id  0 | task 2119 | processing task\n"
        "srv    send_error: task id = 2119, error: the request exceeds the available context size. try increasing"
        " the context size or enable context shift\n"
    )
    assert _diagnosed(tmp_path, log) == ("request_rejected", ["prompt_exceeds_max_model_len"])


def test_a_start_that_fails_after_the_http_server_came_up(tmp_path: Path) -> None:
    # sgl-project/sglang#2468: uvicorn is up, then the server's own warmup request fails and it kills itself.
    log = (
        "[2024-12-13 01:45:02] INFO:     Application startup complete.\n"
        "[2024-12-13 01:47:34] Initialization failed. warmup error: Traceback (most recent call last):\n"
        '  File "/home/sglang/python/sglang/srt/server.py", line 621, in _wait_and_warmup\n'
        "AssertionError: res=<Response [502]>, res.text=''\n"
        "Killed\n"
    )
    assert _diagnosed(tmp_path, log)[0] == "startup_failure"


def test_a_load_summary_with_layers_left_on_the_cpu(tmp_path: Path) -> None:
    # ollama/ollama#8393 (as quoted by a maintainer): the model loaded, two layers stayed in host memory.
    log = (
        "llm_load_tensors: offloading 31 repeating layers to GPU\n"
        "llm_load_tensors: offloaded 31/33 layers to GPU\n"
        "llm_load_tensors: CUDA_Host model buffer size = 809.84 MiB\n"
    )
    assert _diagnosed(tmp_path, log) == ("slow_generation", ["partial_cpu_offload"])


def test_nvidia_smi_that_cannot_reach_the_driver_is_a_failed_start(tmp_path: Path) -> None:
    smi = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n"
    from llmtriage.diagnose.engine import diagnose

    result = diagnose(scene(tmp_path, nvidia_smi=smi).evidence)
    assert (result.symptom_class, result.causes[0].id) == ("startup_failure", "gpu_not_visible")


def test_an_oom_only_a_decoding_server_prints_is_a_runtime_oom(tmp_path: Path) -> None:
    # sgl-project/sglang#4602: the KV pool could not hand out slots for a decode batch.
    log = "RuntimeError: Decode out of memory. Try to lower your batch size.\nTry to allocate 148 tokens.\n"
    assert _diagnosed(tmp_path, log)[0] == "runtime_oom"


def test_a_load_the_client_cancelled_is_not_a_failure(tmp_path: Path) -> None:
    # ollama/ollama#7408: the client gave up 5 s into loading a 70B model; Ollama aborted the load on purpose.
    log = (
        'time=2024-10-29T03:24:29.283Z level=WARN source=server.go:594 msg="client connection closed before server'
        ' finished loading, aborting load"\n'
        'time=2024-10-29T03:24:29.283Z level=ERROR source=sched.go:455 msg="error loading llama server"'
        ' error="timed out waiting for llama runner to start: context canceled"\n'
        '[GIN] 2024/10/29 - 03:24:29 | 499 |  5.239788128s |   10.102.227.89 | POST     "/api/chat"\n'
    )
    assert _diagnosed(tmp_path, log) == ("healthy", [])


def test_an_error_raised_in_torchs_graph_capture_is_a_capture_oom(tmp_path: Path) -> None:
    # vllm-project/vllm#15228: V1 runs out of memory at the end of a CUDA graph capture.
    prefix = "(VllmWorker rank=1 pid=2775) ERROR 03-20 16:54:38 [multiproc_executor.py:375] "
    log = (
        f'{prefix}  File "/usr/local/lib/python3.10/dist-packages/torch/cuda/graphs.py", line 84, in capture_end\n'
        f"{prefix}    super().capture_end()\n"
        f"{prefix}RuntimeError: CUDA error: out of memory\n"
    )
    assert _diagnosed(tmp_path, log) == ("startup_oom", ["cuda_graph_capture_memory"])


def test_a_runner_with_only_cpu_backends_runs_on_the_cpu(tmp_path: Path) -> None:
    # ollama/ollama#14119: the install lost its GPU backends; the runner's summary lists CPU ones only.
    log = "time=2026-02-06T23:25:30.196-03:00 level=INFO source=ggml.go:104 msg=system CPU.0.LLAMAFILE=1 compiler=cgo(gcc)\n"
    assert _diagnosed(tmp_path, log) == ("slow_generation", ["no_gpu_offload"])


def test_cuda_that_cannot_start_explains_the_errors_printed_before_it(tmp_path: Path) -> None:
    # huggingface/text-generation-inference#463 (falcon-40b, sharded): the launcher prints a shard's stderr after
    # its traceback; CUDA never started (804), so the flash-attention kernels were never importable.
    log = (
        "NotImplementedError: Sharded RefinedWeb requires Flash Attention CUDA kernels to be installed.\n"
        "2023-06-15T16:56:42.105200Z ERROR text_generation_launcher: Shard 0 failed to start:\n"
        "/opt/conda/lib/python3.9/site-packages/torch/cuda/__init__.py:107: UserWarning: CUDA initialization:"
        " Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling"
        " NumCudaDevices() that might have already set an error? Error 804: forward compatibility was attempted on"
        " non supported HW (Triggered internally at /opt/conda/conda-bld/pytorch_1678402412426/work/c10/cuda/\n"
    )
    cls, causes = _diagnosed(tmp_path, log)
    assert (cls, causes[0]) == ("startup_failure", "driver_cuda_mismatch")


@pytest.mark.parametrize(("holder", "named"), [("796.00 MiB", True), ("20.99 GiB", False)])
def test_the_processes_of_an_oom_message_wrapped_over_lines(tmp_path: Path, holder: str, named: bool) -> None:
    # NovaSky-AI/SkyRL#2051 as pasted: the OOM message wrapped; the neighbour's line stands on its own. A process
    # holding all the memory in use (22.03 - 0.57 GiB, within one CUDA context) is the server itself.
    log = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 594.00 MiB.\n"
        "GPU 0 has a total capacity of 22.03 GiB of which 582.00 MiB is free.\n"
        f"Process 29529 has {holder} memory in use. ... this process has 20.67 GiB in use.\n"
    )
    assert bool(signals(startup.other_processes, scene(tmp_path, log=log))) is named


def _vllm_stats(prompt: float, generation: float, running: int, pending: int) -> str:
    return (
        f"INFO 11-21 00:12:13 llm_engine.py:624] Avg prompt throughput: {prompt} tokens/s, Avg generation throughput:"
        f" {generation} tokens/s, Running: {running} reqs, Swapped: 0 reqs, Pending: {pending} reqs, GPU KV cache"
        " usage: 27.1%, CPU KV cache usage: 0.0%\n"
    )


@pytest.mark.parametrize(
    ("steps", "named"),
    [
        ([(1032.4, 0.0, 22), (1096.2, 0.0, 24)], True),
        ([(1032.4, 0.0, 22), (1096.2, 12.5, 24)], False),  # decoding went on in the second interval
        ([(1032.4, 0.0, 22), (0.0, 0.0, 24)], False),  # nothing at all in the second: a stall, not prefill
        ([(1032.4, 0.0, 0), (1096.2, 0.0, 0)], False),  # nothing running to starve
    ],
)
def test_intervals_that_ran_prompts_only_are_prefill_congestion(
    tmp_path: Path, steps: list[tuple[float, float, int]], named: bool
) -> None:
    # vllm-project/vllm#1734 (vLLM 0.2): pending requests drain in prompt-only steps while decoding stops.
    log = "".join(_vllm_stats(p, g, r, 3) for p, g, r in steps)
    notes = [n for _, _, n in signals(latency.prefill_jam, scene(tmp_path, log=log))]
    assert any("ran prompts only" in n for n in notes) is named, notes


def test_a_weights_summary_printed_after_the_error_starts_no_new_lifecycle(tmp_path: Path) -> None:
    # vllm-project/vllm#13061 as pasted: a worker's 'Loading model weights took' line lands after the error.
    log = (
        "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored"
        " in KV cache (81536). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when"
        " initializing the engine.    \n"
        "ERROR 02-11 07:40:49 multiproc_worker_utils.py:124] Worker VllmWorkerProcess pid 1786 died, exit code: -15\n"
        "(VllmWorkerProcess pid=1786) INFO 02-11 07:40:45 model_runner.py:1115] Loading model weights took 13.9476 GB\n"
    )
    cls, causes = _diagnosed(tmp_path, log)
    assert (cls, causes[0]) == ("startup_oom", "kv_cache_too_small_for_max_model_len")


@pytest.mark.parametrize(
    ("request_line", "named"),
    [
        ('http://172.16.37.200:3138 "GET http://0.0.0.0:25600/get_model_info HTTP/1.1" 403 3582', True),
        ('http://0.0.0.0:25600 "GET /get_model_info HTTP/1.1" 403 3582', False),  # direct: the server's own answer
        ('http://172.16.37.200:3138 "GET http://0.0.0.0:25600/get_model_info HTTP/1.1" 200 3582', False),
    ],
)
def test_the_servers_call_to_itself_through_a_proxy(tmp_path: Path, request_line: str, named: bool) -> None:
    # sgl-project/sglang#9155: with http_proxy set, SGLang's warmup call to 0.0.0.0 went to the proxy (403).
    log = (
        "[2025-08-13 11:01:02] INFO:     Application startup complete.\n"
        "[2025-08-13 11:01:02] INFO:     Uvicorn running on http://0.0.0.0:25600 (Press CTRL+C to quit)\n"
        "[2025-08-13 11:01:03] Starting new HTTP connection (1): 172.16.37.200:3138\n"
        f"[2025-08-13 11:01:03] {request_line}\n"
    )
    cls, causes = _diagnosed(tmp_path, log)
    assert (cls == "startup_failure" and causes[:1] == ["proxy_intercepts_local_requests"]) is named, (cls, causes)


# vllm-project/vllm#27313: the wait vLLM's shm_broadcast.py prints after 60 s without an answer from a peer; the
# second form is the same line cut after "in 60", as 1CatAI/1Cat-vLLM#652 pasted it.
PEER_WAIT = (
    "(EngineCore_DP0 pid=77352) INFO 10-22 09:43:49 [shm_broadcast.py:466] No available shared memory broadcast "
    "block found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming "
    "work (e.g. compilation).\n"
)
PEER_WAIT_CUT = (
    "(EngineCore pid=...) INFO [shm_broadcast.py:705] No available shared memory broadcast block found in 60\n"
)
LOADED = "(Worker_TP0 pid=77400) INFO 10-22 09:41:02 [default_loader.py:267] Loading weights took 38.21 seconds\n"
READY = "(APIServer pid=77300) INFO:     Application startup complete.\n"


@pytest.mark.parametrize(
    ("log", "tp", "named"),
    [
        (LOADED + PEER_WAIT, 2, True),
        (LOADED + PEER_WAIT_CUT, 4, True),
        (LOADED + PEER_WAIT, 1, False),  # one GPU process: the wait is the front end's, compilation say
        (LOADED + PEER_WAIT + READY, 2, False),  # it came up after the wait
    ],
)
def test_a_parallel_start_that_ends_waiting_for_its_peers(tmp_path: Path, log: str, tp: int, named: bool) -> None:
    cls, causes = _diagnosed(tmp_path, log, f"vllm serve Qwen/Qwen3-32B --tensor-parallel-size {tp}")
    assert (cls == "startup_failure" and causes[:1] == ["nccl_or_distributed_init"]) is named, (cls, causes)


@pytest.mark.parametrize(("ret", "named"), [("1", True), ("-1", False)])
def test_llama_cpp_kv_full_wording_is_no_kv_space_only_for_a_positive_ret(
    tmp_path: Path, ret: str, named: bool
) -> None:
    # gpustack/gpustack#1359 (llama-box): update_slots prints the KV-full wording for ret < 0 too, a decode error.
    log = (
        "0.00.015.363 I srv  llama_server: listening on http://127.0.0.1:39873\n"  # tests/fixtures/llamacpp-cpu
        "3.49.305.562 E llama_decode: failed to decode, ret = -1\n"
        "3.49.305.567 E srv              update_slots: failed to decode the batch: KV cache is full - try increasing "
        f"it via the context size, i = 0, n_batch = 2048, ret = {ret}\n"
    )
    cls, causes = _diagnosed(tmp_path, log)
    assert (causes[:1] == ["concurrency_exceeds_kv_pool"]) is named, (cls, causes)


# SGLang's watchdog only counts while the scheduler holds a batch; TGI's router tags the lines of a request batch with
# its span: either shows the server was serving. Lines from sgl-project/sglang#4163 and
# huggingface/text-generation-inference#1374 (the catalog's examples).
WATCHDOG = "[2025-03-09 00:57:15 TP4] Watchdog timeout (self.watchdog_timeout=300)\n"
TGI_BATCH_OOM = (
    "2024-01-02T10:00:00.000000Z ERROR batch{batch_size=1}:prefill:prefill{id=1 size=1}:prefill{id=1 size=1}:"
    " text_generation_client: router/client/src/lib.rs:33: Server error: CUDA out of memory. Tried to allocate"
    " 222.00 MiB. GPU 0 has a total capacty of 39.39 GiB of which 217.94 MiB is free.\n"
)
# The contrast: the same message with no request batch's span on it (built), as when it is not a request's.
TGI_UNPLACED_OOM = TGI_BATCH_OOM.replace("batch{batch_size=1}:prefill:prefill{id=1 size=1}:prefill{id=1 size=1}:", "")


@pytest.mark.parametrize(
    ("log", "up", "cls"),
    [
        (WATCHDOG, "yes", "engine_stalled"),
        (
            WATCHDOG
            + "[2025-03-09 00:57:20] Received sigquit from a child proces. It usually means the child failed.\n"
            + "Killed\n",
            "yes",
            "engine_stalled",
        ),
        (TGI_BATCH_OOM, "yes", "runtime_oom"),
        (TGI_UNPLACED_OOM, "no", "startup_oom"),
    ],
    ids=["watchdog", "watchdog-then-killed", "tgi-request-batch-oom", "tgi-oom-no-batch"],
)
def test_an_error_only_a_serving_engine_prints_means_it_was_up(tmp_path: Path, log: str, up: str, cls: str) -> None:
    assert questions.server_up(scene(tmp_path / "q", log=log)).answer == up
    assert _diagnosed(tmp_path / "d", log)[0] == cls


@pytest.mark.parametrize(
    "line",
    [
        # ik_llama.cpp discussion (2025-08-03), the text format
        'INFO [      log_server_request] request | tid="132614511681536" timestamp=1754241226'
        ' remote_addr="192.168.0.201" remote_port=62771 status=200 method="POST" path="/v1/chat/completions" params={}',
        # a llama.cpp server walkthrough (2023-07), JSON in insertion order
        '{"timestamp":1689524758,"level":"INFO","function":"log_server_request","line":1076,"message":"request",'
        '"remote_addr":"127.0.0.1","remote_port":61649,"status":200,"method":"POST","path":"/completion","params":{}}',
        # a llama.cpp issue thread (2024-04), JSON with sorted keys
        '{"function":"log_server_request","level":"INFO","line":2730,"method":"POST","msg":"request","params":{},'
        '"path":"/completion","remote_addr":"127.0.0.1","remote_port":37158,"status":200,"tid":"133124421846592",'
        '"timestamp":1712615664}',
    ],
    ids=["text", "json", "json-sorted"],
)
def test_the_old_llama_cpp_server_access_lines_show_it_serving(tmp_path: Path, line: str) -> None:
    found = scene(tmp_path / "ok", log=line + "\n")
    assert found.http_posts == (1, 0, 0)
    assert questions.server_up(found).answer == "yes"
    failed = line.replace("200", "500")
    assert scene(tmp_path / "failed", log=failed + "\n").http_posts == (1, 0, 1)
