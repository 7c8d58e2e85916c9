"""The OpenAI error object, `{"error": {"message", "type", "param", "code"}}`: one builder for
every error specroute itself answers with (bad input, all backends failed, a stream that broke).

Pure: builds the JSON value; the edges encode it (a JSON response, an SSE `data:` event).
"""

from __future__ import annotations

import json
from typing import Any, Final

_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    502: "upstream_error",
    503: "service_unavailable",
}


def error_type(status: int) -> str:
    return _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")


def error_body(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The error object for an HTTP `status` (its `type` follows from the status)."""
    return {"error": {"message": message, "type": error_type(status), "param": param,
                      "code": code or None}}


def error_event(status: int, message: str, *, code: str | None = None) -> bytes:
    """The error object as one SSE event, for a stream that cannot go on."""
    return b"data: " + json.dumps(error_body(status, message, code=code)).encode() + b"\n\n"
