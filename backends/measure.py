"""Measuring a response as it passes: TTFT, decode tokens/s, and what the backend reported.

Pure: the caller passes every timestamp (`now`), so the arithmetic is testable without a clock.
Decode tokens/s is measured from the first content-bearing event to the last, over the tokens
generated after the first: `(tokens - 1) / (t_last - t_first)`. Token count is the backend's
`completion_tokens` when reported, else the number of content events. With `text_cap` > 0 it
also keeps the first `text_cap` characters of the generated text (for operators who turned
content logging on; off by default, so nothing of a completion is held).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from backends.stats import EMPTY, UpstreamReport, merge, read_report

# The last event of an Anthropic messages stream and of an OpenAI responses stream (chat and
# completions streams end with `data: [DONE]`, which carries no JSON: backends/sse.is_done).
FINAL_EVENT_TYPES: Final = frozenset(
    {"message_stop", "response.completed", "response.incomplete", "response.failed"})


@dataclass(slots=True)
class StreamMeter:
    started_at: float
    first_content_at: float | None = None
    last_content_at: float | None = None
    content_events: int = 0
    report: UpstreamReport = field(default=EMPTY)
    ended: bool = False  # the stream's last event has passed (`is_final_event`)
    text_cap: int = 0
    _text: list[str] = field(default_factory=list)
    _text_len: int = 0

    def observe(self, payload: Any, now: float) -> None:
        """Fold one parsed event (or a whole non-stream response) into the measurement."""
        if not isinstance(payload, Mapping):
            return
        if carries_content(payload):
            if self.first_content_at is None:
                self.first_content_at = now
            self.last_content_at = now
            self.content_events += 1
        if self._text_len < self.text_cap:
            piece = output_text(payload)[: self.text_cap - self._text_len]
            self._text.append(piece)
            self._text_len += len(piece)
        self.report = merge(self.report, read_report(payload))

    def text(self) -> str:
        return "".join(self._text)

    def ttft_ms(self) -> float | None:
        if self.first_content_at is None:
            return None
        return round((self.first_content_at - self.started_at) * 1000, 3)

    def decode_tps(self) -> float | None:
        first, last = self.first_content_at, self.last_content_at
        tokens = self.report.completion_tokens or self.content_events
        if first is None or last is None or last <= first or tokens < 2:
            return None
        return round((tokens - 1) / (last - first), 3)


def is_final_event(payload: Any) -> bool:
    """Whether a parsed event is its stream's last (Anthropic's `message_stop`, the responses
    API's `response.completed` and its kin)."""
    return isinstance(payload, Mapping) and payload.get("type") in FINAL_EVENT_TYPES


def carries_content(payload: Mapping[str, Any]) -> bool:
    """Whether a chunk/event carries generated output (text, reasoning or a tool call)."""
    choices = payload.get("choices")
    if isinstance(choices, Sequence) and not isinstance(choices, (str, bytes)):
        return any(_choice_has_content(c) for c in choices)
    kind = payload.get("type")
    if kind == "content_block_delta":  # Anthropic messages
        delta = payload.get("delta")
        return isinstance(delta, Mapping) and any(
            delta.get(k) for k in ("text", "thinking", "partial_json")
        )
    if isinstance(kind, str) and kind.startswith("response.") and kind.endswith(".delta"):
        return bool(payload.get("delta"))  # OpenAI responses
    return False


def output_text(payload: Mapping[str, Any]) -> str:
    """The generated text (and tool-call arguments) in one chunk, event or whole response, of
    any of the four APIs."""
    parts: list[str] = []
    choices = payload.get("choices")
    if isinstance(choices, Sequence) and not isinstance(choices, (str, bytes)):
        for choice in choices:
            if isinstance(choice, Mapping):
                parts.append(_str(choice.get("text")))
                for key in ("delta", "message"):
                    parts.extend(_message_text(choice.get(key)))
    kind = payload.get("type")
    delta = payload.get("delta")
    if kind == "content_block_delta" and isinstance(delta, Mapping):  # Anthropic stream
        parts.append(_str(delta.get("text")) + _str(delta.get("partial_json")))
    elif isinstance(kind, str) and kind.startswith("response.") and kind.endswith(".delta"):
        parts.append(_str(delta))  # OpenAI responses stream
    if kind == "message":  # Anthropic, not streamed
        parts.extend(_blocks_text(payload.get("content")))
    if payload.get("object") == "response":  # OpenAI responses, not streamed
        for item in _seq(payload.get("output")):
            if isinstance(item, Mapping):
                parts.extend(_blocks_text(item.get("content")))
                parts.append(_str(item.get("arguments")))
    return "".join(parts)


def _message_text(message: object) -> list[str]:
    if not isinstance(message, Mapping):
        return []
    parts = [_str(message.get("content"))]
    for call in _seq(message.get("tool_calls")):
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            parts.append(_str(function.get("name")) + _str(function.get("arguments")))
    return parts


def _blocks_text(blocks: object) -> list[str]:
    out = []
    for block in _seq(blocks):
        if isinstance(block, Mapping):
            out.append(_str(block.get("text")))
            if block.get("type") == "tool_use":
                out.append(_str(block.get("name")) + json.dumps(block.get("input"),
                                                                 ensure_ascii=False))
    return out


def _seq(value: object) -> Sequence[Any]:
    return value if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else ()


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def is_usage_only(payload: Any) -> bool:
    """The trailing usage chunk of `stream_options.include_usage`: no choices, a usage block."""
    return (
        isinstance(payload, Mapping)
        and payload.get("choices") == []
        and isinstance(payload.get("usage"), Mapping)
    )


def _choice_has_content(choice: object) -> bool:
    if not isinstance(choice, Mapping):
        return False
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    if isinstance(delta, Mapping):
        return any(delta.get(k) for k in ("content", "reasoning_content", "tool_calls", "reasoning"))
    return False
