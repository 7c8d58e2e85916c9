"""What the client receives of an engine's answer: the engine's bytes minus what the proxy
itself asked for (the usage chunk of `stream_options.include_usage`, SGLang's `meta_info`).

Pure: a filter of one SSE event, or of one JSON body, given its parsed payload; no I/O. Every
byte the proxy did not add reaches the client as the engine wrote it. `client_events` and
`observed_body` are the one relay step of both front ends (backends/upstream, router/epp): the
answer read, measured and filtered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from backends.jsonedit import drop_member
from backends.measure import StreamMeter, is_final_event, is_usage_only
from backends.sse import SSESplitter, event_json, is_done, loads_or_none

_META_INFO_ARRAYS: Final = frozenset({"choices"})  # SGLang puts meta_info at the top and per choice


@dataclass(frozen=True, slots=True)
class Added:
    """What the proxy added to the request that the client did not ask for."""

    usage: bool = False  # the include_usage chunk (`"choices": []`)
    meta_info: bool = False  # SGLang's `meta_info`


def client_event(raw: bytes, payload: object, added: Added) -> bytes | None:
    """One SSE event as the client gets it, or None when the whole event is the proxy's."""
    if added.usage and is_usage_only(payload):
        return None
    if added.meta_info and has_meta_info(payload):
        return _event_without_meta_info(raw, payload)
    return raw


def client_body(body: bytes, payload: object, added: Added) -> bytes:
    """A non-stream JSON body as the client gets it."""
    if added.meta_info and has_meta_info(payload):
        return without_meta_info(body, payload)
    return body


def client_events(splitter: SSESplitter, chunk: bytes, meter: StreamMeter, added: Added,
                  now: float) -> bytes:
    """The events `chunk` completes, each measured, as the client gets them (an event cut
    short waits in `splitter` for its end); the stream's last event noted on the meter."""
    kept = []
    for raw in splitter.feed(chunk):
        payload = event_json(raw)
        meter.observe(payload, now)
        if is_final_event(payload) or (payload is None and is_done(raw)):
            meter.ended = True
        event = client_event(raw, payload, added)
        if event is not None:
            kept.append(event)
    return b"".join(kept)


def observed_body(body: bytes, content_type: str, meter: StreamMeter, added: Added,
                  now: float) -> bytes:
    """A whole non-stream answer, measured (when it says it is JSON), as the client gets it."""
    payload = loads_or_none(body) if "json" in content_type else None
    meter.observe(payload, now)
    return client_body(body, payload, added)


def has_meta_info(payload: object) -> bool:
    if not isinstance(payload, dict):
        return False
    choices = payload.get("choices")
    in_choices = isinstance(choices, list) and any(
        isinstance(c, dict) and "meta_info" in c for c in choices
    )
    return "meta_info" in payload or in_choices


def without_meta_info(body: bytes, payload: object) -> bytes:
    """The JSON `body` minus the `meta_info` the proxy asked for (top level and per choice),
    every other byte as the engine wrote it; re-encoded from `payload` only when the bytes
    cannot be edited (not UTF-8)."""
    try:
        edited = drop_member(body.decode("utf-8"), "meta_info", in_arrays=_META_INFO_ARRAYS)
    except UnicodeDecodeError:
        edited = None
    if edited is None:
        edited = drop_member(json.dumps(payload, ensure_ascii=False), "meta_info",
                             in_arrays=_META_INFO_ARRAYS)
    assert edited is not None  # `payload` is the JSON object `body` held
    return edited.encode()


def _event_without_meta_info(raw: bytes, payload: object) -> bytes:
    """One `data: {...}` SSE event minus `meta_info`, its framing kept."""
    head, sep, rest = raw.partition(b"data:")
    body = rest.rstrip(b"\r\n")
    if sep and b"\n" not in body:
        start = len(body) - len(body.lstrip(b" "))
        return head + sep + body[:start] + without_meta_info(body[start:], payload) + \
            rest[len(body):]
    return b"data: " + without_meta_info(b"", payload) + b"\n\n"  # multi-line: re-encoded
