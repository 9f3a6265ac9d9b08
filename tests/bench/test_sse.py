"""The stream parser: what counts as a token, and bytes split anywhere across reads."""

from __future__ import annotations

import json

import pytest

from llmtriage.bench.sse import StreamParser


def event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chat(delta: dict[str, object], finish: str | None = None) -> bytes:
    return event(
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    )


def text(value: str, finish: str | None = None) -> bytes:
    return event({"object": "text_completion", "choices": [{"index": 0, "text": value, "finish_reason": finish}]})


USAGE = event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
DONE = b"data: [DONE]\n\n"


def test_completion_tokens_gaps_usage_and_done() -> None:
    p = StreamParser()
    p.feed(text(" a"), 1.0)
    p.feed(text(" b") + text(" c", "length"), 1.5)
    p.feed(USAGE + DONE, 1.6)
    assert (p.tokens, p.first_token_s, p.last_token_s) == (3, 1.0, 1.5)
    assert p.gaps_s == [0.5, 0.0]  # two tokens in one read arrive together
    assert (p.usage_tokens, p.prompt_tokens, p.finish_reason, p.done_s) == (3, 7, "length", 1.6)
    assert p.finished and not p.malformed and p.error is None


def test_empty_role_chunk_and_finish_only_chunk_are_not_tokens() -> None:
    p = StreamParser()
    p.feed(chat({"role": "assistant", "content": ""}), 1.0)
    p.feed(chat({}, "stop"), 2.0)
    assert p.tokens == 0 and p.first_token_s is None and p.finish_reason == "stop"


def test_empty_completion_text_before_the_finish_is_a_held_back_token() -> None:
    """vLLM sends ``"text": ""`` while its detokenizer holds a partial UTF-8 character; the token was generated."""
    p = StreamParser()
    p.feed(text(""), 1.0)
    p.feed(text("é"), 1.2)
    p.feed(text("", "length"), 1.3)
    assert (p.tokens, p.first_token_s, p.last_token_s, p.finish_reason) == (2, 1.0, 1.2, "length")


@pytest.mark.parametrize(
    "delta",
    [
        {"content": "hi"},
        {"reasoning_content": "hmm"},
        {"reasoning": "hmm"},
        {"tool_calls": [{"index": 0, "function": {"name": "f"}}]},
        {"role": "assistant", "content": "", "tool_calls": [{"index": 0}]},
    ],
)
def test_any_kind_of_output_is_the_first_token(delta: dict[str, object]) -> None:
    p = StreamParser()
    p.feed(chat({"role": "assistant", "content": ""}), 1.0)
    p.feed(chat(delta), 2.0)
    assert p.tokens == 1 and p.first_token_s == 2.0


def test_bytes_split_anywhere_give_the_same_result() -> None:
    stream = chat({"role": "assistant", "content": ""}) + chat({"content": "é"}) + chat({"content": "x"}, "stop")
    stream += USAGE + DONE
    whole = StreamParser()
    whole.feed(stream, 1.0)
    for cut in range(1, len(stream)):
        split = StreamParser()
        split.feed(stream[:cut], 1.0)
        split.feed(stream[cut:], 1.0)
        assert (split.tokens, split.usage_tokens, split.done_s, split.malformed) == (2, 3, 1.0, 0), cut


def test_crlf_line_endings_even_split_inside_a_crlf() -> None:
    stream = (text(" a") + text(" b") + DONE).replace(b"\n", b"\r\n")
    cut = stream.index(b"\r\n") + 1  # between \r and \n
    p = StreamParser()
    p.feed(stream[:cut], 1.0)
    p.feed(stream[cut:], 2.0)
    assert p.tokens == 2 and p.done_s == 2.0 and p.malformed == 0


def test_comments_other_fields_and_multiline_data() -> None:
    head, tail = b'{"choices":', b' [{"text": "a"}]}'  # the lines of one event join with a newline
    block = b": ping\n\nid: 7\nevent: message\ndata: " + head + b"\ndata:" + tail + b"\n\n"
    p = StreamParser()
    p.feed(block, 1.0)
    assert (p.events, p.tokens, p.malformed) == (1, 1, 0)


def test_malformed_event_is_counted_with_an_excerpt() -> None:
    p = StreamParser()
    p.feed(b'data: {"choices": [{"text": "a"\n\n' + text(" b") + b"data: 42\n\n" + DONE, 1.0)
    assert p.malformed == 2 and p.malformed_excerpt is not None and p.malformed_excerpt.startswith('{"choices"')
    assert p.tokens == 1


def test_error_object_in_the_stream() -> None:
    p = StreamParser()
    p.feed(text(" a") + event({"error": {"message": "engine dead", "code": 500}}), 1.0)
    assert p.error == "engine dead" and not p.finished
    # JSON may escape half a surrogate pair: the message is kept as text, not encoded (which would raise).
    broken = StreamParser()
    broken.feed(b'data: {"error": "\\ud800 cut"}\n\n', 1.0)
    assert broken.error == "\ud800 cut"


def test_unfinished_stream_keeps_its_leftover() -> None:
    p = StreamParser()
    p.feed(text(" a") + b'data: {"choi', 1.0)
    assert p.tokens == 1 and not p.finished and p.leftover == b'data: {"choi'
