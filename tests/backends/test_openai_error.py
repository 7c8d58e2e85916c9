"""The one OpenAI error object: its type follows the status, and the SSE form is one event."""

from __future__ import annotations

import pytest

from backends.openai_error import error_body, error_event
from backends.sse import SSESplitter, event_json


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "invalid_request_error"), (403, "permission_error"), (404, "not_found_error"),
     (413, "invalid_request_error"), (422, "invalid_request_error"), (500, "server_error"),
     (502, "upstream_error"), (503, "service_unavailable")],
)
def test_the_type_follows_the_status(status: int, kind: str) -> None:
    body = error_body(status, "why", param="messages", code="bad")
    assert body == {"error": {"message": "why", "type": kind, "param": "messages", "code": "bad"}}


def test_an_empty_code_is_null() -> None:
    assert error_body(400, "why", code="")["error"]["code"] is None


def test_the_stream_error_is_one_sse_event_holding_the_same_object() -> None:
    raw = error_event(502, "mtp-0: stream broke", code="backend_failed")
    events = SSESplitter().feed(raw)
    assert len(events) == 1
    assert event_json(events[0]) == error_body(502, "mtp-0: stream broke", code="backend_failed")
