"""The watch table fits the display: whole columns go, least judged first, and no value is ever cut."""

from __future__ import annotations

from llmtriage import catalog
from llmtriage.capture.gpu import GpuRow
from llmtriage.watch import view
from llmtriage.watch.endpoint import Frame
from llmtriage.watch.watcher import WatchState

HEADERS = [name for name, _ in view.COLUMNS]


def _gpu(index: int) -> GpuRow:
    return GpuRow(
        timestamp_s=0.0, index=index, name="NVIDIA H100 80GB HBM3", memory_used_mib=74_112.0,
        memory_total_mib=81_559.0, utilization_gpu_pct=100.0, power_draw_w=612.4, power_limit_w=700.0,
        temperature_c=61.0, sm_clock_mhz=1980.0, sm_clock_max_mhz=1980.0, pstate="P0", clocks_event_reasons_mask=0,
    )  # fmt: skip


def _state() -> WatchState:
    state = WatchState()
    state.frames["http://inference-node-07.internal:8000"] = Frame(
        url="http://inference-node-07.internal:8000", timestamp_s=0.0, up=True, engine="vllm", ttft_p95_s=3.412,
        tpot_p95_s=0.0871, itl_p95_s=0.0712, running=256.0, waiting=1183.0, kv_usage_ratio=0.994,
        preemptions_per_s=12.25, prompt_tokens_per_s=48_211.0, generation_tokens_per_s=9_874.0, error_ratio=0.0123,
        gpus=(_gpu(0), _gpu(1)), probe_first_token_s=4.2,
    )  # fmt: skip
    state.breached["http://inference-node-07.internal:8000"] = frozenset({"ttft_p95", "queue"})
    state.frames["http://127.0.0.1:8001"] = Frame(url="http://127.0.0.1:8001", timestamp_s=0.0, up=False,
                                                  error="connection refused")  # fmt: skip
    return state


def _lines(width: int | None) -> list[str]:
    return view.table(_state(), catalog.thresholds(), width).plain.splitlines()


def test_all_columns_without_a_width() -> None:
    header = _lines(None)[0]
    assert all(name in header for name in HEADERS)


def test_120_columns_keep_every_judged_value_whole() -> None:
    full = _lines(None)
    narrow = _lines(120)
    assert len(full[0]) > 120 and all(len(line) <= 120 for line in narrow)
    header = narrow[0]
    # The SLO columns stay; what goes goes whole, the least judged first.
    for name in ("server", "state", "TTFT p95", "TPOT p95", "run/wait", "KV", "gen tok/s", "errors"):
        assert name in header
    dropped = [name for name in HEADERS if name not in header]
    assert dropped and set(dropped) == set(view.DROPPED_FIRST[: len(dropped)])
    row = next(line for line in narrow if "inference-node-07" in line)
    for value in ("inference-node-07.internal:8000", "3.41 s", "256/1183", "99%", "9874", "1.2%"):
        assert value in row, (value, row)
    # A note that does not fit beside its row goes under it, whole.
    assert f"{view.NOTE_INDENT}connection refused" in narrow and f"{view.NOTE_INDENT}probe TTFT 4.20 s" in narrow


def test_a_display_wide_enough_drops_nothing() -> None:
    full = _lines(None)
    assert _lines(max(len(line) for line in full)) == full
