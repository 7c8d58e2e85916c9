"""HTTP handlers: read the request, call the pure core, forward, log. Kept short on purpose.

Routed endpoints (`/v1/chat/completions`, `/v1/completions`, `/v1/messages`, `/v1/responses`)
are classified and sent to the chosen profile; `/v1/models` merges the backends' lists; every
other normalised `/v1/*` path goes unchanged to the default backend. Other methods on the
routed paths and on `/v1/models` get a JSON 405, not the backend's own page.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

from aiohttp import web

from backends.capability import ProbeResult
from backends.engines import adapter_for
from backends.measure import StreamMeter
from backends.upstream import ForwardOptions, ForwardResult, Outbound, forward
from router import state
from router.edge.openapi import openapi_document
from router.edge.paths import ALLOWED_METHODS, MODELS, ROUTED, forwardable_path
from router.instances.pool import POOL
from router.learning.online import ONLINE, pace_status
from router.learning.sinks import SINK_HEALTH
from router.replicas import peers
from router.replicas.link import REPLICAS
from router.request.core import CORE
from router.request.errors import RequestError, method_not_allowed, unreadable_body
from router.request.lifecycle import (
    models_listing,
    plan_for,
    route_headers,
    send_begins,
    settle_and_account,
)
from router.request.routing import RoutedRequest
from router.request.upstream_body import upstream_body

# /readyz re-probes backends not probed within this long, waiting at most READYZ_WAIT_S: with no
# traffic, a dead backend shows on /readyz at once rather than at the next periodic probe.
READYZ_MAX_AGE_S = 1.0
READYZ_WAIT_S = 1.0


def add_routes(app: web.Application) -> None:
    for path, endpoint in ROUTED.items():
        app.router.add_post(path, _routed_handler(endpoint))
    app.router.add_get(MODELS, models)
    for path, allow in ALLOWED_METHODS.items():
        app.router.add_route("*", path, _method_not_allowed(allow))
    app.router.add_route("*", "/v1/{tail:.*}", passthrough)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/openapi.json", openapi)


def _method_not_allowed(allow: str) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        raise method_not_allowed(request.method, request.path, allow)

    return handler


async def read_body(request: web.Request) -> bytes:
    """The request body, decoded per its Content-Encoding; a body that cannot be read as
    declared (gzip that is not gzip, a broken chunked framing) is the client's fault: 400."""
    try:
        return await request.read()
    except web.RequestPayloadError as exc:
        cause = exc.__cause__ or exc.__context__
        raise unreadable_body(type(cause).__name__ if cause is not None else "payload error") \
            from exc


def _routed_handler(endpoint: str) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await routed(request, endpoint)

    return handler


async def routed(request: web.Request, endpoint: str) -> web.StreamResponse:
    app = request.app
    deps, pool = app[state.DEPS], app[POOL]
    started = deps.clock()
    raw = await read_body(request)
    plan = plan_for(app[CORE], endpoint, raw, request.headers, started)
    primary = plan.decision.backend
    if primary and app.get(REPLICAS) is not None:
        passed = await _through_owner(request, endpoint, raw, plan, started)
        if isinstance(passed, web.StreamResponse):
            return passed
        plan = passed
        primary = plan.decision.backend
    adapter = adapter_for(pool.runtime(primary if primary else plan.order[0]).spec)
    body, tweaked = upstream_body(plan, raw, adapter, request.path)
    config = app[state.CONFIG]
    options = ForwardOptions(
        connect_timeout_s=config.limits.connect_timeout_s,
        first_byte_timeout_s=config.limits.first_byte_timeout_s,
        strip_usage=tweaked.added_usage,
        strip_meta_info=tweaked.added_meta_info,
    )
    # Filled as the request goes: a client hanging up midway leaves a complete record so far.
    sending = await send_begins(app[CORE], app[state.SESSION], plan, started)
    result = sending.result
    ended = False
    publishing = app.get(REPLICAS) is not None

    async def answered() -> None:
        # The engine is free: other replicas hear of it before this client can send its next
        # request (through one of them); the yield lets the publisher send it first. Alone, no
        # one is told: no yield (a turn of the loop per request).
        nonlocal ended
        ended = True
        result.ran_in(primary, pool.end(primary, sending.ticket, deps.clock()))
        if publishing:
            await asyncio.sleep(0)

    try:
        return await forward(Outbound(
            request, app[state.SESSION], pool.targets(plan.order), request.path, body,
            clock=deps.clock, options=options,
            response_headers=lambda r: route_headers(plan, r, started), answered=answered,
        ), result)
    except asyncio.CancelledError:  # the client went away; the upstream call is closed
        result.client_disconnected = True
        raise
    finally:
        if not ended:
            result.ran_in(primary, pool.end(primary, sending.ticket, deps.clock()))
        await settle_and_account(app[CORE], app[state.SESSION], plan, sending, started)


async def _through_owner(request: web.Request, endpoint: str, raw: bytes, plan: RoutedRequest,
                         started: float) -> web.StreamResponse | RoutedRequest:
    """With replicas (router/replicas/peers): the answer of the replica that owns the chosen instance,
    or the plan to send from here (not passed on, the owner away, or declining: then planned
    again outside its share); a request passed here for its sender's share is declined."""
    app = request.app
    pool, link = app[POOL], app[REPLICAS]
    owner = pool.owner(plan.decision.backend)
    if peers.declines(request.headers.get(peers.VIA, ""), owner):
        return peers.declined_response(link.replica)
    peer = peers.peer_for(owner, link.replica, link.peer_urls, request.headers,
                          plan.decision.queue_ms)
    if not peer or not link.passed_on.usable(peer, started):
        return plan
    relayed = await peers.relay(request, app[state.SESSION], peer, raw, link.replica)
    if isinstance(relayed, web.StreamResponse):
        link.passed_on.taken(peer)
        return relayed
    if relayed is peers.NotTaken.DECLINED:
        link.passed_on.declined_by(peer)
        return _outside_share(app, endpoint, raw, request, plan, owner)
    link.passed_on.not_taken_by(peer, app[state.DEPS].clock())
    return plan


def _outside_share(app: web.Application, endpoint: str, raw: bytes, request: web.Request,
                   plan: RoutedRequest, owner: str) -> RoutedRequest:
    """The plan again, among the instances outside `owner`'s share (it declined: its share is
    busy), its instances still last in the failover order; the first plan when nothing
    outside it is healthy."""
    pool = app[POOL]
    outside = [name for name in pool.names if pool.owner(name) != owner]
    again = plan_for(app[CORE], endpoint, raw, request.headers, app[state.DEPS].clock(),
                     among=outside)
    if not again.decision.backend:
        return plan
    return dataclasses.replace(
        again, order=(*again.order, *(n for n in plan.order if n not in again.order)))


async def models(request: web.Request) -> web.Response:
    return web.json_response(await models_listing(request.app[CORE], request.app[state.SESSION]))


async def passthrough(request: web.Request) -> web.StreamResponse:
    """Any other normalised /v1/* path: unchanged to the default backend (the others if it is
    down). `..`, `.` and empty segments, raw or percent-encoded, are a 404: they would reach
    the backend's own endpoints."""
    path = forwardable_path(request.path)
    if path is None:
        raise RequestError(404, "Unknown path.", code="not_found")
    app = request.app
    deps, pool, config = app[state.DEPS], app[POOL], app[state.CONFIG]
    started = deps.clock()
    order = pool.default_order(config.default_backend_name, started)
    body = await read_body(request) if request.can_read_body else None
    result = ForwardResult(meter=StreamMeter(started_at=started))
    response = await forward(Outbound(
        request, app[state.SESSION], pool.targets(order), path, body, clock=deps.clock,
        options=ForwardOptions(connect_timeout_s=config.limits.connect_timeout_s),
        response_headers=lambda r: {"x-specroute-backend": r.backend or "none"},
    ), result)
    for name in result.failover_from:
        pool.mark_failed(name, deps.clock(), result.error)
    return response


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def _store_status(app: web.Application) -> dict[str, Any]:
    """The shared store's state (router/replicas/link); `off` for one process."""
    link = app.get(REPLICAS)
    if link is None:
        return {"state": "off"}
    return {**link.health.describe(), "load_direct": sorted(link.direct)}


def _probed(backends: list[dict[str, Any]], probe: ProbeResult | None) -> list[dict[str, Any]]:
    """Each backend with the startup probe's verdict on it: `drafts` (it drafted on the probes:
    true; it drafted nothing: false; not probed, or its engine reports no drafts: null) and
    `probe_warnings` (what the probe found wrong there: a speculating instance that drafted on
    neither probe, a plain one that drafts, a probe that failed)."""
    return [{**b, "drafts": None if probe is None else probe.drafts(b["name"]),
             "probe_warnings": [] if probe is None else list(
                 probe.backend_warnings.get(b["name"], ()))}
            for b in backends]


async def readyz(request: web.Request) -> web.Response:
    app = request.app
    supervisor = app.get(state.SUPERVISOR)
    if supervisor is not None:
        with contextlib.suppress(TimeoutError):  # a hung probe: report what is known
            await asyncio.wait_for(supervisor.refresh(READYZ_MAX_AGE_S), READYZ_WAIT_S)
    now = app[state.DEPS].clock()
    pool = app[POOL]
    ready = pool.any_healthy(now)
    return web.json_response(
        {"ready": ready, "backends": _probed(pool.describe(now), app.get(state.PROBE)),
         "record_sinks": app[SINK_HEALTH].describe(),
         "route_model": pace_status(app[ONLINE].model,
                                    {b.spec_key for b in app[state.CONFIG].backends}),
         "store": _store_status(app)},
        status=200 if ready else 503,
    )


__all__ = ["RequestError", "add_routes"]
