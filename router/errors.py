"""OpenAI-style errors at the edge: every failure the client sees is `{"error": {...}}` JSON.

The middleware maps aiohttp's own HTTP exceptions (404, 405, 413 ...) and anything unexpected
to that shape, so that a client never receives an HTML page or a stack trace.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from backends.openai_error import error_body

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RequestError(Exception):
    """A bad request, with its HTTP status and the offending parameter."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


def error_response(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> web.Response:
    return web.json_response(error_body(status, message, param=param, code=code), status=status)


def _echo_path(path: str, cap: int = 200) -> str:
    """A client's path quoted in a message or the log: at most `cap` characters."""
    return path if len(path) <= cap else f"{path[:cap]}... ({len(path)} characters)"


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RequestError as exc:
        return error_response(exc.status, exc.message, param=exc.param, code=exc.code)
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(413, f"Request body too large: {exc.text}", code="body_too_large")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.reason if exc.status != 404 else f"Unknown path {_echo_path(request.path)}"
        response = error_response(exc.status, message, code=exc.reason.lower().replace(" ", "_"))
        if "Allow" in exc.headers:  # a 405 says what is allowed (RFC 9110 15.5.6)
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except ConnectionResetError:
        raise
    except Exception:  # noqa: BLE001  # a clean 500 for the client; the trace goes to our log
        structlog.get_logger("specroute").exception("unhandled_error", path=_echo_path(request.path))
        return error_response(500, "Internal error in specroute; see its log.", code="internal")
