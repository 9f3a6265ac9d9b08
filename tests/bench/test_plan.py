"""Configuration to requests: mixes, deterministic prompts, JSONL, arrival times, worker shares."""

from __future__ import annotations

import itertools
import json
import statistics

import pytest

from llmtriage.bench.model import Arrival, BenchConfig, Endpoint, PromptLine, RequestClass
from llmtriage.bench.plan import RequestFactory, arrival_offsets_s, parse_mix, read_prompts, server_root, share
from llmtriage.errors import UsageError

LONG = RequestClass("long", 12000, 32, 1.0)
SHORT = RequestClass("short", 200, 64, 8.0)


def test_parse_mix() -> None:
    assert parse_mix("long:prompt_chars=12000,max_tokens=32,weight=1") == LONG
    assert parse_mix("s:prompt_chars=10,max_tokens=2") == RequestClass("s", 10, 2, 1.0)


BAD_MIXES = [
    "long",
    ":prompt_chars=1,max_tokens=1",
    "a:prompt_chars=1",
    "a:prompt_chars=x,max_tokens=1",
    "a:size=1",
    "a:prompt_chars=0,max_tokens=1",
    "a:prompt_chars=1,max_tokens=1,weight=0",
]


@pytest.mark.parametrize("text", BAD_MIXES)
def test_bad_mix_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError):
        parse_mix(text)


def test_read_prompts() -> None:
    lines = read_prompts('{"prompt": "a"}\n\n{"prompt": "b", "max_tokens": 5}\n', "p.jsonl")
    assert lines == (PromptLine("a"), PromptLine("b", 5))
    for bad in ('{"prompt": 1}', "not json", '{"prompt": "a", "max_tokens": -1}', ""):
        with pytest.raises(UsageError):
            read_prompts(bad, "p.jsonl")


def body(config: BenchConfig, index: int) -> dict[str, object]:
    data: dict[str, object] = json.loads(RequestFactory(config).make(index, False).body)
    return data


def test_prompts_are_deterministic_exact_and_distinct() -> None:
    config = BenchConfig(base_url="http://x", classes=(RequestClass("c", 3000, 8),), seed=3, model="m")
    first, again = body(config, 5), body(config, 5)
    assert first == again
    assert len(str(first["prompt"])) == 3000
    assert body(config, 6)["prompt"] != first["prompt"]
    other_seed = BenchConfig(base_url="http://x", classes=config.classes, seed=4, model="m")
    assert body(other_seed, 5)["prompt"] != first["prompt"]
    assert first["model"] == "m" and first["max_tokens"] == 8 and first["stream"] is True
    assert first["stream_options"] == {"include_usage": True} and "ignore_eos" not in first


def test_chat_body_without_model_with_ignore_eos() -> None:
    config = BenchConfig(base_url="http://x", endpoint=Endpoint.chat, ignore_eos=True)
    data = body(config, 0)
    assert "model" not in data and data["ignore_eos"] is True
    messages = data["messages"]
    assert isinstance(messages, list) and messages[0]["role"] == "user"


def test_mix_follows_weights_and_each_class_its_lengths() -> None:
    config = BenchConfig(base_url="http://x", classes=(LONG, SHORT), seed=1)
    factory = RequestFactory(config)
    planned = [factory.make(i, False) for i in range(900)]
    longs = [p for p in planned if p.class_name == "long"]
    assert 60 <= len(longs) <= 140  # weight 1 of 9
    assert all(p.prompt_chars == 12000 and p.max_tokens == 32 for p in longs)
    assert all(p.prompt_chars == 200 and p.max_tokens == 64 for p in planned if p.class_name == "short")


def test_jsonl_prompts_cycle_and_override_max_tokens() -> None:
    config = BenchConfig(base_url="http://x", prompts=(PromptLine("a"), PromptLine("b", 5)))
    factory = RequestFactory(config)
    made = [factory.make(i, False) for i in range(3)]
    assert [(m.prompt_chars, m.max_tokens, m.class_name) for m in made] == [
        (1, 64, "file"),
        (1, 5, "file"),
        (1, 64, "file"),
    ]


def test_constant_and_poisson_arrivals() -> None:
    constant = BenchConfig(base_url="http://x", request_rate_per_s=4.0, arrival=Arrival.constant)
    assert list(itertools.islice(arrival_offsets_s(constant), 4)) == [0.0, 0.25, 0.5, 0.75]
    poisson = BenchConfig(base_url="http://x", request_rate_per_s=10.0, seed=9)
    draws = list(itertools.islice(arrival_offsets_s(poisson), 4001))
    assert draws == list(itertools.islice(arrival_offsets_s(poisson), 4001))
    gaps = [b - a for a, b in itertools.pairwise(draws)]
    assert statistics.fmean(gaps) == pytest.approx(0.1, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(0.1, rel=0.1)  # exponential: sd = mean


def test_server_root_and_shares() -> None:
    assert server_root("http://h:8000/v1/") == "http://h:8000"
    assert server_root(" http://h:8000 ") == "http://h:8000"
    with pytest.raises(UsageError):
        server_root("h:8000")
    assert [share(10, k, 4) for k in range(4)] == [3, 3, 2, 2]
