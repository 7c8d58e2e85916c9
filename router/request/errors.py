"""OpenAI-style errors at the edge: every failure the client sees is `{"error": {...}}` JSON.

The middleware maps aiohttp's own HTTP exceptions (404, 405, 413 ...) and anything unexpected
to that shape, so that a client never receives an HTML page or a stack trace. The errors both
front ends give for the same request (the proxy, router/epp) are built here, once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Final

import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from backends.openai_error import error_body

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_PARSE_CODES: Final = {400: "bad_request", 413: "request_too_large", 431: "headers_too_large"}


class RequestError(Exception):
    """A bad request, with its HTTP status and the offending parameter."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str = "",
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})  # what the answer must carry too (a 405's Allow)


def body_too_large(limit: int) -> RequestError:
    return RequestError(413, f"Request body too large: Maximum request body size {limit} "
                        "exceeded.", code="body_too_large")


def unreadable_body(kind: str) -> RequestError:
    """A body that cannot be read as its headers declare (gzip that is not gzip, ...)."""
    return RequestError(
        400, f"The request body could not be read as declared by its headers ({kind}).",
        code="invalid_body_encoding",
    )


def method_not_allowed(method: str, path: str, allow: str) -> RequestError:
    return RequestError(405, f"{method} is not allowed on {path}; use {allow}.",
                        code="method_not_allowed", headers={"Allow": allow})


def describe_parse_error(exc: BaseException | None) -> str:
    """What was wrong, in words of our own: never the offending bytes."""
    if isinstance(exc, LineTooLong):
        return "A request line or header is longer than the server accepts."
    if isinstance(exc, HttpProcessingError):
        return f"The HTTP request could not be parsed ({type(exc).__name__})."
    return "The HTTP request could not be parsed."


def parse_error(status: int, exc: BaseException | None) -> RequestError:
    """A request that could not be parsed (a 4xx `status`, router/edge/httpserver), as the client
    is told."""
    return RequestError(status, describe_parse_error(exc),
                        code=_PARSE_CODES.get(status) or phrase_code(status))


def phrase_code(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_")
    except ValueError:  # a status without a standard phrase
        return "bad_request" if status < 500 else "internal"


def error_response(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> web.Response:
    return web.json_response(error_body(status, message, param=param, code=code), status=status)


def _answer(exc: RequestError) -> web.Response:
    response = error_response(exc.status, exc.message, param=exc.param, code=exc.code)
    response.headers.update(exc.headers)
    return response


def _echo_path(path: str, cap: int = 200) -> str:
    """A client's path quoted in a message or the log: at most `cap` characters."""
    return path if len(path) <= cap else f"{path[:cap]}... ({len(path)} characters)"


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RequestError as exc:
        return _answer(exc)
    except web.HTTPRequestEntityTooLarge:
        return _answer(body_too_large(request.client_max_size))
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
