"""The client's view of an engine's answer, on the recorded llama.cpp streams: what the proxy
asked for is gone, every other byte is the engine's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.client_view import Added, client_body, client_event, client_events
from backends.measure import StreamMeter, is_usage_only
from backends.sse import SSESplitter, event_json

RECORDINGS = Path(__file__).resolve().parent / "recordings"
STREAMS = ["chat_stream_mtp.sse", "chat_stream_plain.sse"]
REQUESTS = json.loads((RECORDINGS / "requests.json").read_text(encoding="utf-8"))


def _asked_for_usage(name: str) -> bool:
    options = REQUESTS[name.removesuffix(".sse")]["body"].get("stream_options") or {}
    return bool(options.get("include_usage"))


def _events(name: str) -> list[bytes]:
    splitter = SSESplitter()
    raw = (RECORDINGS / name).read_bytes()
    return splitter.feed(raw) + ([rest] if (rest := splitter.flush()) else [])


def _client_stream(events: list[bytes], added: Added) -> bytes:
    kept = (client_event(raw, event_json(raw), added) for raw in events)
    return b"".join(event for event in kept if event is not None)


@pytest.mark.parametrize("name", STREAMS)
def test_nothing_added_is_the_recording_byte_for_byte(name: str) -> None:
    assert _client_stream(_events(name), Added()) == (RECORDINGS / name).read_bytes()


@pytest.mark.parametrize("name", STREAMS)
def test_the_usage_chunk_the_proxy_asked_for_is_the_only_event_dropped(name: str) -> None:
    events = _events(name)
    usage = [raw for raw in events if is_usage_only(event_json(raw))]
    assert len(usage) == (1 if _asked_for_usage(name) else 0)
    client = _client_stream(events, Added(usage=True))
    assert client == b"".join(raw for raw in events if raw not in usage)
    assert client.endswith(b"data: [DONE]\n\n")


def test_meta_info_is_cut_from_an_event_and_the_rest_is_the_engines_bytes() -> None:
    raw = (b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"hi"},'
           b'"meta_info":{"spec_verify_ct":3}}],"meta_info":{"completion_tokens":5}}\n\n')
    event = client_event(raw, event_json(raw), Added(meta_info=True))
    assert event == b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    assert client_event(raw, event_json(raw), Added()) == raw


def test_meta_info_is_cut_from_a_json_body_only_when_the_proxy_asked_for_it() -> None:
    body = '{"id": "x", "meta_info": {"n": 1}, "choices": [{"text": "é"}]}'.encode()
    payload = json.loads(body)
    assert client_body(body, payload, Added(meta_info=True)) == (
        '{"id": "x", "choices": [{"text": "é"}]}'.encode())
    assert client_body(body, payload, Added(usage=True)) == body


@pytest.mark.parametrize("name", STREAMS)
def test_the_stream_has_ended_once_its_done_event_passed_and_not_before(name: str) -> None:
    raw = (RECORDINGS / name).read_bytes()
    done = raw.rindex(b"data: [DONE]")
    meter, splitter = StreamMeter(started_at=0.0), SSESplitter()
    client_events(splitter, raw[:done + 8], meter, Added(), 1.0)  # [DONE] not yet whole
    assert not meter.ended and meter.content_events > 0
    client_events(splitter, raw[done + 8:], meter, Added(), 2.0)
    assert meter.ended


@pytest.mark.parametrize(("last", "ends"), [
    (b'event: message_stop\ndata: {"type":"message_stop"}\n\n', True),  # Anthropic messages
    (b'data: {"type":"response.completed","response":{"id":"r"}}\n\n', True),  # responses API
    (b'data: {"type":"response.output_text.delta","delta":"hi"}\n\n', False),
    (b'data: {"note":"[DONE]"}\n\n', False),  # the words, not the event
])
def test_each_api_s_last_event_ends_its_stream(last: bytes, ends: bool) -> None:
    meter = StreamMeter(started_at=0.0)
    assert client_events(SSESplitter(), last, meter, Added(), 1.0) == last
    assert meter.ended is ends
