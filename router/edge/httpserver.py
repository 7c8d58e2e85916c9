"""The HTTP server the proxy runs on: aiohttp's, with its own protocol-level errors shaped.

aiohttp answers a request it cannot parse (an 8 KB header, a 9 KB request line, a broken
chunked body, a bad method) before any middleware runs: a plain-text body quoting up to ~100
bytes of the offending input (an `Authorization: Bearer ...` header, say) and a traceback in the
operator log. Here those answers are OpenAI-style JSON errors that quote nothing the client
sent, and the operator log gets one warning line.

`ProxyRunner` is `web.AppRunner` with that request handler; `serve` runs it until SIGINT or
SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from router.request.errors import error_response, parse_error, phrase_code

# Another server run beside the app, for as long as it runs (router/epp's gRPC server).
Beside = Callable[[web.Application], AbstractAsyncContextManager[Any]]

log = structlog.get_logger("specroute")


class _ProxyRequestHandler(RequestHandler):
    __slots__ = ()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:  # not the client's fault: keep the trace for the operator
            log.error("http_error", status=status, error=type(exc).__name__, exc_info=exc)
            text, code = "Internal error in specroute; see its log.", phrase_code(status)
        else:
            log.warning("bad_http_request", status=status, error=type(exc).__name__,
                        peer=request.remote)
            refused = parse_error(status, exc)
            text, code = refused.message, refused.code
        if request.writer.output_size > 0:  # bytes went out already: nothing else can be sent
            raise ConnectionError("response already started; cannot send the error")
        response = error_response(status, text, code=code)
        response.force_close()
        return response


class _ProxyServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _ProxyRequestHandler(self, loop=self._loop, **self._kwargs)


class ProxyRunner(web.AppRunner):
    """`web.AppRunner` whose connections answer parse errors as OpenAI-style JSON."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _ProxyServer  # same server, our request handler per connection
        return server


def make_runner(app: web.Application, **kwargs: Any) -> ProxyRunner:
    # handler_cancellation: a client that disconnects cancels its handler, which closes the
    # upstream request and so cancels the generation on the backend.
    return ProxyRunner(app, handler_cancellation=True, access_log=None, **kwargs)


async def serve(app: web.Application, host: str, port: int,
                beside: Beside | None = None) -> None:
    """Serve `app` until SIGINT or SIGTERM, then shut down cleanly (cleanup contexts run).
    `beside`: another server on the same app (the endpoint picker's gRPC), started once the
    app is and stopped before it."""
    runner = make_runner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"specroute listening on http://{host}:{port}/v1", file=sys.stderr, flush=True)
        async with contextlib.AsyncExitStack() as stack:
            if beside is not None:
                await stack.enter_async_context(beside(app))
            await stop.wait()
    finally:
        await runner.cleanup()
