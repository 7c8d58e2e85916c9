"""`create_app(config, deps=...)`: the aiohttp application, its state and its background work.

State lives in typed `web.AppKey`s; the HTTP client session, the decision log and background
tasks live in `cleanup_ctx`; the rooms' background loops (the supervisor, the learner, the
engines' gauges, the replicas) and `/metrics` and `/dashboard` (`router.addons`) are add-ons. Nothing
here is a module-level singleton: two apps in one process (as in tests) share nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Sequence
from typing import Final

import aiohttp
import structlog
from aiohttp import web

from classifiers.features import TokenCounter
from classifiers.memos import AskMemo, ToolsMemo
from decisionlog.writer import DecisionLog
from policies import NEUTRAL, PolicyStore, SessionTable, learned_path_for, paces
from router.addons.dashboard import DashboardAddon
from router.addons.metrics import MetricsAddon
from router.config import Config
from router.edge import handlers
from router.instances.engine_load import EngineGauges
from router.instances.pace_probe import measured_notes, probe_records
from router.instances.pool import POOL, BackendPool
from router.instances.supervision import Supervision
from router.learning.online import ONLINE, OnlineModel
from router.learning.relearn import LEARNER, BackgroundLearner, Learner
from router.learning.scorer_holder import SCORER, ScorerHolder
from router.learning.sinks import (
    RECORDS,
    SINK_HEALTH,
    SINKS,
    RecordQueue,
    SinkHealth,
    write_batch,
)
from router.replicas.link import replica_id
from router.replicas.loops import ReplicaSharing
from router.replicas.peer_load import PeerLoad
from router.request.core import CORE, Core
from router.request.errors import openai_errors
from router.state import (
    ASK_MEMO,
    CONFIG,
    DEPS,
    POLICY,
    PROBE,
    SESSION,
    SESSIONS,
    TASKS,
    TOKENS,
    TOOLS_MEMO,
    TURN_SHARERS,
    Addon,
    Deps,
    RecordSink,
)

log = structlog.get_logger("specroute")
# Shorter than the backends' own keep-alive (5 s for llama-server and uvicorn).
UPSTREAM_KEEPALIVE_S: Final = 4.0
TOKEN_CACHE: Final = 4096


def create_app(config: Config, *, deps: Deps | None = None) -> web.Application:
    deps = deps or Deps()
    app = web.Application(middlewares=[openai_errors],
                          client_max_size=config.limits.max_body_bytes)
    # replicas on one host share the policy's directory: each learns into its own file
    learned = (learned_path_for(config.policy, replica_id(config)) if config.replicas.store
               else None)
    store = PolicyStore(config.policy, learned, now=deps.clock(), pools=config.all_pools)
    stickiness = store.policy.stickiness
    app[CONFIG] = config
    app[DEPS] = deps
    app[POOL] = BackendPool(config.backends, pools=config.all_pools,
                            load_max_age_s=config.load.max_age_s)
    app[SCORER] = ScorerHolder(config.classifier, deps.scorer)
    app[POLICY] = store
    app[SESSIONS] = SessionTable(stickiness.max_conversations, stickiness.ttl_s)
    app[TOKENS] = deps.count_tokens if deps.count_tokens is not None else _load_tokens(config)
    online = OnlineModel(store)  # the route model, updated as records are written
    app[ONLINE] = online
    sinks: list[RecordSink] = [online]
    app[SINKS] = sinks
    app[TASKS] = set()
    app[TURN_SHARERS] = []
    app[LEARNER] = Learner(store, config.log.path, deps.clock)
    app[TOOLS_MEMO] = ToolsMemo()
    app[ASK_MEMO] = AskMemo()
    # The app's own set-up and tear-down, in this order, and the add-ons' after them: the
    # supervisor's start-up probe is recorded once the decision log is open.
    app.cleanup_ctx.append(_client_session)
    install(app, [Supervision()])
    app.cleanup_ctx.extend([_decision_log, _record_probe, _reloader])
    handlers.add_routes(app)
    metrics = MetricsAddon(admin_token=config.admin.token)
    install(app, [BackgroundLearner(), EngineGauges(), ReplicaSharing(),
                  PeerLoad(),  # after the replicas' sharing: it follows their link
                  metrics, DashboardAddon(admin_token=config.admin.token)])
    app[SINKS].extend(deps.sinks)
    # A sink that fails is counted on /metrics as well as reported on /readyz.
    app[SINK_HEALTH] = SinkHealth(on_failure=metrics.metrics.inc_sink_failure)
    app[RECORDS] = RecordQueue(app[SINKS], app[SINK_HEALTH], interval_s=deps.record_interval_s)
    app[CORE] = Core(
        config=config, deps=deps, pool=app[POOL], policy=store, sessions=app[SESSIONS],
        online=online, scorer=app[SCORER], count_tokens=app[TOKENS], tools_memo=app[TOOLS_MEMO],
        ask_memo=app[ASK_MEMO], records=app[RECORDS], tasks=app[TASKS],
        turn_sharers=app[TURN_SHARERS],
    )
    return app


def install(app: web.Application, addons: Sequence[Addon]) -> None:
    """Each add-on's routes on `app`, the add-on among its record sinks when it takes records,
    its cleanup_ctx run."""
    for addon in addons:
        addon.add_routes(app)
        if addon.takes_records:
            app[SINKS].append(addon)
        app.cleanup_ctx.append(addon.cleanup_ctx)


def _load_tokens(config: Config) -> TokenCounter | None:
    if not config.tokenizer:
        return None
    from classifiers.tokenizer import TokenizerUnavailable, load_counter

    try:
        counter = load_counter()
    except TokenizerUnavailable as exc:
        log.warning("tokenizer_unavailable", error=str(exc), fallback="character estimate")
        return None
    # Features tokenize a short sample of the last user turn; an agent loop sends the same turn
    # with every tool result, so most samples repeat. Bounded: TOKEN_CACHE samples.
    return functools.lru_cache(maxsize=TOKEN_CACHE)(counter)


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
        app[RECORDS].flush()


async def _record_probe(app: web.Application) -> AsyncIterator[None]:
    """The startup probe's timed answers as the first records (the decision log is open now):
    the route model learns this machine's paces before the first client request."""
    result = app.get(PROBE)
    if result is not None:
        records = probe_records(result, app[CONFIG].backends, app[SCORER].current, app[TOKENS],
                                app[DEPS].wall_clock())
        sinks = app[SINKS]
        write_batch(sinks, records, app[SINK_HEALTH])  # as any batch of records
        model = app[ONLINE].model
        measured = paces(model, {b.spec_key for b in app[CONFIG].backends})
        plain = measured[0]
        log.info("paces_measured", prior=model.prior.name, probes=len(records),
                 ms_per_token={p.profile: round(p.ms_per_token, 3) for p in measured},
                 speedup={p.profile: round(plain.ms_per_token / p.ms_per_token, 3)
                          for p in measured[1:]})
        # a machine prior the operator chose that the machine contradicts is worth a warning;
        # the neutral prior claims nothing (its figures are placeholders to be measured)
        report = log.info if model.prior.name == NEUTRAL.name else log.warning
        for note in measured_notes(records, model):
            report("prior_discounted", detail=note)
    yield


async def _reloader(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(_reload_loop(app))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _reload_loop(app: web.Application) -> None:
    """Hot reload: the policy and learned state, the classifier artifact; expire sessions."""
    deps = app[DEPS]
    while True:
        await asyncio.sleep(deps.reload_interval_s)
        reload_once(app)


def reload_once(app: web.Application) -> None:
    now = app[DEPS].clock()
    store = app[POLICY]
    if store.reload_if_changed(now):
        stickiness = store.policy.stickiness
        app[SESSIONS].resize(stickiness.max_conversations, stickiness.ttl_s)
    app[SCORER].reload_if_changed()
    app[SESSIONS].expire(now)
