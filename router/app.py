"""`create_app(config, deps=...)`: the aiohttp application, its state and its background work.

State lives in typed `web.AppKey`s; the HTTP client session, the decision log and background
tasks live in `cleanup_ctx`. Nothing here is a module-level singleton: two apps in one process
(as in tests) share nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import aiohttp
import structlog
from aiohttp import web

from classifiers.features import TokenCounter
from decisionlog.records import RouteRecord
from decisionlog.writer import DecisionLog
from policies.armstore import ArmsHolder, arms_path_for
from policies.sessions import SessionTable
from policies.store import PolicyStore
from router import handlers
from router.addons.dashboard import RecentRecords, add_dashboard_routes
from router.addons.metrics import Metrics
from router.config import Config
from router.errors import openai_errors
from router.learning import background_learner
from router.pool import BackendPool
from router.scoring import ScorerHolder
from router.state import (
    ARMS,
    CONFIG,
    DEPS,
    METRICS,
    POLICY,
    POOL,
    RECENT,
    SCORER,
    SESSION,
    SESSIONS,
    SINKS,
    TASKS,
    TOKENS,
    Deps,
)
from router.supervision import record_restarts, supervise

log = structlog.get_logger("specroute")
# Shorter than the backends' own keep-alive (5 s for llama-server and uvicorn).
UPSTREAM_KEEPALIVE_S: Final = 4.0


class CallSink:
    """A record sink from a function (metrics, the dashboard's ring)."""

    def __init__(self, function: Callable[[RouteRecord], None]) -> None:
        self._function = function

    def write_record(self, record: RouteRecord) -> None:
        self._function(record)


def create_app(config: Config, *, deps: Deps | None = None) -> web.Application:
    deps = deps or Deps()
    max_body = int(config.limits.max_body_mb * 2**20)
    app = web.Application(middlewares=[openai_errors], client_max_size=max_body)
    store = PolicyStore(config.policy, now=deps.clock(), pools=config.pools)
    stickiness = store.policy.stickiness
    app[CONFIG] = config
    app[DEPS] = deps
    app[POOL] = BackendPool(config.backends, pools=config.pools)
    app[SCORER] = ScorerHolder(config.classifier, deps.scorer)
    app[POLICY] = store
    app[ARMS] = ArmsHolder(arms_path_for(config.policy))
    app[SESSIONS] = SessionTable(stickiness.max_conversations, stickiness.ttl_s)
    app[TOKENS] = deps.count_tokens if deps.count_tokens is not None else _load_tokens(config)
    app[METRICS] = Metrics()
    app[RECENT] = RecentRecords()
    app[SINKS] = [CallSink(app[METRICS].observe), CallSink(app[RECENT].add), *deps.sinks]
    app[TASKS] = set()
    app.cleanup_ctx.append(_client_session)
    app.cleanup_ctx.append(supervise)
    app.cleanup_ctx.append(_decision_log)
    app.cleanup_ctx.append(_reloader)
    app.cleanup_ctx.append(background_learner)
    handlers.add_routes(app)
    add_dashboard_routes(app, records_source=app[RECENT].snapshot, status_source=lambda: _status(app))
    return app


def _status(app: web.Application) -> dict[str, Any]:
    """What the dashboard shows besides the records: backend health and learned thresholds."""
    backends = app[POOL].describe(app[DEPS].clock())
    learned = app[POLICY].learned
    thresholds = {
        key: {"value": b.threshold, "uncertainty": b.se, "trusted": b.trusted}
        for key, b in learned.beliefs.items()
    }
    return {"backends": backends, "thresholds": thresholds}


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
    # No auto-decompression: the backend's bytes reach the client as they were sent. Idle
    # connections are dropped before the backends drop them (llama-server and uvicorn, under
    # vLLM and SGLang, close after 5 s): reusing one as it closes loses the request's connection.
    connector = aiohttp.TCPConnector(
        limit=0, enable_cleanup_closed=True, keepalive_timeout=UPSTREAM_KEEPALIVE_S
    )
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        app[SESSION] = session
        yield


async def _decision_log(app: web.Application) -> AsyncIterator[None]:
    settings = app[CONFIG].log
    with DecisionLog(settings.path, rotate_mb=settings.rotate_mb, keep=settings.keep) as sink:
        app[SINKS].insert(0, sink)
        yield
        if app[TASKS]:  # records still being settled are written before the log closes
            await asyncio.gather(*app[TASKS], return_exceptions=True)


async def _reloader(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(_reload_loop(app))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _reload_loop(app: web.Application) -> None:
    """Hot reload: the policy and learned state, the classifier artifact; expire sessions."""
    deps = app[DEPS]
    restarts_seen: dict[str, int] = {}
    while True:
        await asyncio.sleep(deps.reload_interval_s)
        reload_once(app)
        record_restarts(app, restarts_seen)


def reload_once(app: web.Application) -> None:
    now = app[DEPS].clock()
    store, metrics = app[POLICY], app[METRICS]
    failed_before = sum(store.counters.failed.values())
    if store.reload_if_changed(now):
        metrics.policy_reload(ok=True)
        stickiness = store.policy.stickiness
        app[SESSIONS].resize(stickiness.max_conversations, stickiness.ttl_s)
        for key, threshold in store.learned.thresholds().items():
            metrics.set_threshold(key, threshold)
    if sum(store.counters.failed.values()) > failed_before:
        metrics.policy_reload(ok=False)
    app[SCORER].reload_if_changed()
    app[ARMS].reload_if_changed()
    app[SESSIONS].expire(now)
    for backend in app[POOL].describe(now):
        metrics.set_backend_health(str(backend["name"]), str(backend["profile"]), bool(backend["healthy"]))
