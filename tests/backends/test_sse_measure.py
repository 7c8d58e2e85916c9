"""SSE splitting without re-encoding, and the stream meter's arithmetic (pure)."""

from __future__ import annotations

import pytest

from backends.measure import StreamMeter, carries_content, is_usage_only, output_text
from backends.sse import SSESplitter, event_data, event_json

STREAM = (
    b": prefill\n\n"
    b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"b"}}]}\r\n\r\n'
    b"event: x\ndata: [DONE]\n\n"
)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(STREAM)])
def test_splitting_in_any_chunk_size_gives_the_same_bytes(size: int) -> None:
    splitter = SSESplitter()
    events: list[bytes] = []
    for i in range(0, len(STREAM), size):
        events += splitter.feed(STREAM[i : i + size])
    assert splitter.flush() == b""
    assert b"".join(events) == STREAM
    assert len(events) == 4
    assert events[0] == b": prefill\n\n"


def test_unterminated_tail_is_flushed() -> None:
    splitter = SSESplitter()
    assert splitter.feed(b"data: 1\n\ndata: 2") == [b"data: 1\n\n"]
    assert splitter.flush() == b"data: 2"


@pytest.mark.parametrize(
    ("raw", "data", "parsed"),
    [
        (b": prefill\n\n", None, None),
        (b"data: [DONE]\n\n", b"[DONE]", None),
        (b'data: {"a":1}\n\n', b'{"a":1}', {"a": 1}),
        (b'data:{"a":2}\n\n', b'{"a":2}', {"a": 2}),
        (b"data: not json\n\n", b"not json", None),
        (b'data: {"a":\ndata: 3}\n\n', b'{"a":\n3}', {"a": 3}),
    ],
)
def test_event_payloads(raw: bytes, data: bytes | None, parsed: object) -> None:
    assert event_data(raw) == data
    assert event_json(raw) == parsed


@pytest.mark.parametrize(
    ("payload", "content"),
    [
        ({"choices": [{"delta": {"content": "x"}}]}, True),
        ({"choices": [{"delta": {"content": ""}}]}, False),
        ({"choices": [{"delta": {"reasoning_content": "think"}}]}, True),
        ({"choices": [{"delta": {"tool_calls": [{"index": 0}]}}]}, True),
        ({"choices": [{"text": "y"}]}, True),
        ({"choices": []}, False),
        ({"type": "content_block_delta", "delta": {"text": "z"}}, True),
        ({"type": "message_start"}, False),
        ({"type": "response.output_text.delta", "delta": "w"}, True),
    ],
)
def test_content_detection(payload: dict[str, object], content: bool) -> None:
    assert carries_content(payload) is content


def test_usage_only_chunk() -> None:
    assert is_usage_only({"choices": [], "usage": {"completion_tokens": 3}})
    assert not is_usage_only({"choices": [{"delta": {}}], "usage": {"completion_tokens": 3}})


def test_meter_measures_ttft_and_decode_rate() -> None:
    meter = StreamMeter(started_at=10.0)
    meter.observe({"choices": [{"delta": {"content": "a"}}]}, 10.5)
    for i in range(1, 10):
        meter.observe({"choices": [{"delta": {"content": "b"}}]}, 10.5 + i * 0.1)
    meter.observe({"choices": [], "usage": {"completion_tokens": 10, "prompt_tokens": 4}}, 11.5)
    meter.observe({"choices": [{"delta": {}, "finish_reason": "stop"}],
                   "timings": {"draft_n": 5, "draft_n_accepted": 4, "predicted_per_second": 9.5}}, 11.5)
    assert meter.ttft_ms() == 500.0
    assert meter.decode_tps() == pytest.approx(9 / 0.9, rel=1e-3)
    assert meter.report.completion_tokens == 10
    assert meter.report.prompt_tokens == 4
    assert (meter.report.draft_n, meter.report.draft_accepted) == (5, 4)
    assert meter.report.spec_source == "timings"


def test_meter_without_content_reports_nothing() -> None:
    meter = StreamMeter(started_at=0.0)
    meter.observe({"error": {"message": "x"}}, 1.0)
    assert meter.ttft_ms() is None and meter.decode_tps() is None


@pytest.mark.parametrize(
    ("payload", "text"),
    [
        ({"choices": [{"delta": {"content": "he"}}]}, "he"),
        ({"choices": [{"text": "llo"}]}, "llo"),
        ({"choices": [{"message": {"content": "whole", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": '{"city":"Lisbon"}'}}]}}]},
         'wholeget_weather{"city":"Lisbon"}'),
        ({"choices": [{"delta": {"tool_calls": [{"function": {"arguments": '{"a'}}]}}]}, '{"a'),
        ({"type": "content_block_delta", "delta": {"text": "z"}}, "z"),
        ({"type": "message", "content": [{"type": "text", "text": "m"},
                                         {"type": "tool_use", "name": "f", "input": {"x": 1}}]},
         'mf{"x": 1}'),
        ({"type": "response.output_text.delta", "delta": "w"}, "w"),
        ({"object": "response", "output": [{"content": [{"type": "output_text", "text": "r"}]}]},
         "r"),
        ({"choices": [], "usage": {"completion_tokens": 3}}, ""),
        ({"choices": [{"delta": {"content": None}}]}, ""),
    ],
)
def test_output_text_of_every_api_shape(payload: dict[str, object], text: str) -> None:
    assert output_text(payload) == text


def test_meter_keeps_text_only_when_asked_and_only_up_to_its_cap() -> None:
    chunks = [{"choices": [{"delta": {"content": c}}]} for c in ("abc", "def", "ghi")]
    off, capped = StreamMeter(started_at=0.0), StreamMeter(started_at=0.0, text_cap=5)
    for i, chunk in enumerate(chunks):
        off.observe(chunk, float(i))
        capped.observe(chunk, float(i))
    assert off.text() == ""
    assert capped.text() == "abcde"
