"""Server-sent events, split without re-encoding.

Pure. `SSESplitter.feed(chunk)` returns the complete events seen so far as the exact bytes the
backend sent (terminator included), so that a relay can forward them unchanged, drop one, or
look inside one. `event_data(raw)` reads the `data:` payload of one event.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import orjson

_BOUNDARY: Final = re.compile(rb"\r\n\r\n|\n\n|\r\r")
MAX_EVENT_BYTES: Final = 16 * 2**20  # beyond this, flush what we have rather than grow forever
_DONE: Final = b"[DONE]"


class SSESplitter:
    """Accumulates bytes and yields whole events."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._buffer + chunk
        events: list[bytes] = []
        start = 0
        for match in _BOUNDARY.finditer(data):
            events.append(data[start : match.end()])
            start = match.end()
        self._buffer = data[start:]
        if len(self._buffer) > MAX_EVENT_BYTES:
            events.append(self._buffer)
            self._buffer = b""
        return events

    def flush(self) -> bytes:
        """Whatever is left when the stream ends (an unterminated last event)."""
        rest, self._buffer = self._buffer, b""
        return rest


def is_event_stream(content_type: str) -> bool:
    """Whether a Content-Type (its parameters, if any, included) names an SSE stream."""
    return content_type.split(";", 1)[0].strip().lower() == "text/event-stream"


def event_data(raw: bytes) -> bytes | None:
    """The joined `data:` lines of one event, or None for comments and data-less events."""
    lines = [line for line in raw.splitlines() if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(line[5:].removeprefix(b" ") for line in lines)


def is_done(raw: bytes) -> bool:
    """Whether the event is `data: [DONE]`, the last of an OpenAI chat or completions stream."""
    data = event_data(raw)
    return data is not None and data.startswith(_DONE)


def event_json(raw: bytes) -> Any:
    """The event's data as JSON, or None (comments, `[DONE]`, non-JSON data)."""
    data = event_data(raw)
    if data is None or data.startswith(_DONE):
        return None
    return loads_or_none(data)


def loads_or_none(data: bytes) -> Any:
    """JSON from bytes, or None: orjson first (each SSE event of every stream is read, so this
    is hot), the standard parser for what orjson refuses (lone surrogates, NaN)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data)
    except ValueError:
        return None
