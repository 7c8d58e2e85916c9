"""`create_app(config, deps=...)`: the aiohttp application, its state and its background work.

State lives in typed `web.AppKey`s; the HTTP client session and background tasks live in
`cleanup_ctx`. Nothing here is a module-level singleton: two apps in one process (as in tests)
share nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import structlog
from aiohttp import web

from classifiers.features import TokenCounter
from policies.schema import Policy
from policies.yamlfile import load_model
from router import handlers
from router.config import Config
from router.errors import openai_errors
from router.pool import BackendPool
from router.records import RouteRecord, to_json
from router.scoring import ScorerHolder
from router.state import (
    CONFIG,
    DEPS,
    POLICY,
    POOL,
    SCORER,
    SESSION,
    SINKS,
    TOKENS,
    Deps,
    PolicyHolder,
)

log = structlog.get_logger("specroute")


class FileSink:
    """Appends one JSON line per record to the decision log."""

    def __init__(self, path: str) -> None:
        import os

        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._file = open(path, "a", encoding="utf-8", buffering=1)

    def write_record(self, record: RouteRecord) -> None:
        self._file.write(to_json(record) + "\n")

    def close(self) -> None:
        self._file.close()


def create_app(config: Config, *, deps: Deps | None = None) -> web.Application:
    deps = deps or Deps()
    max_body = int(config.limits.max_body_mb * 2**20)
    app = web.Application(middlewares=[openai_errors], client_max_size=max_body)
    app[CONFIG] = config
    app[DEPS] = deps
    app[POOL] = BackendPool(config.backends)
    app[SCORER] = ScorerHolder(config.classifier, deps.scorer)
    app[POLICY] = PolicyHolder(config.policy, load_model(config.policy, Policy))
    app[TOKENS] = deps.count_tokens if deps.count_tokens is not None else _load_tokens(config)
    app[SINKS] = list(deps.sinks)
    app.cleanup_ctx.append(_client_session)
    app.cleanup_ctx.append(_decision_log)
    app.cleanup_ctx.append(_reloader)
    handlers.add_routes(app)
    return app


def _load_tokens(config: Config) -> TokenCounter | None:
    if not config.tokenizer:
        return None
    from classifiers.tokenizer import TokenizerUnavailable, load_counter

    try:
        return load_counter()
    except TokenizerUnavailable as exc:
        log.warning("tokenizer_unavailable", error=str(exc), fallback="character estimate")
        return None


async def _client_session(app: web.Application) -> AsyncIterator[None]:
    # No auto-decompression: the backend's bytes reach the client as they were sent.
    connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        app[SESSION] = session
        yield


async def _decision_log(app: web.Application) -> AsyncIterator[None]:
    sink = FileSink(app[CONFIG].log.path)
    app[SINKS].insert(0, sink)
    try:
        yield
    finally:
        sink.close()


async def _reloader(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(_reload_loop(app))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _reload_loop(app: web.Application) -> None:
    interval = app[DEPS].reload_interval_s
    while True:
        await asyncio.sleep(interval)
        app[SCORER].reload_if_changed()
