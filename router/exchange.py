"""One routed request's two ends, shared by both front ends (the HTTP proxy, router/handlers,
and the Envoy endpoint picker, router/epp): the plan made from the request's bytes and headers
against the app's state, and the bookkeeping once its answer has left (pool, conversations,
the shared store, the record). One code path: a request gets the same decision and the same
decision-log record whichever front end took it.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping

from aiohttp import web

from backends.upstream import ForwardResult
from router import state
from router.records import record_for
from router.routing import Incoming, RoutedRequest, RoutingInputs, plan_request


def plan_for(app: web.Application, endpoint: str, raw: bytes, headers: Mapping[str, str],
             started: float, among: Collection[str] | None = None) -> RoutedRequest:
    """The routing plan for one request, from the app's state now; raises `RequestError`.
    `among`: the only instances it may go to (a gateway's subset), none outside them."""
    deps, pool, sessions, online = (app[state.DEPS], app[state.POOL], app[state.SESSIONS],
                                    app[state.ONLINE])
    backends = pool.states(started)
    if among is not None:
        backends = [b for b in backends if b.name in among]
    snapshot = app[state.POLICY].snapshot
    incoming = Incoming(
        endpoint, raw, request_id=deps.new_request_id(),
        header_route=headers.get("x-specroute-route"),
        conversation_hint=headers.get("x-specroute-conversation"),
    )
    return plan_request(incoming, RoutingInputs(
        policy=snapshot.policy,
        model=online.model,
        scorer=app[state.SCORER].current,
        count_tokens=app[state.TOKENS],
        backends=backends,
        draw=deps.random() if deps.explore else None,
        held_for=lambda key: sessions.get(key, started),
        arms=online.arms,
        engine_of=lambda name: pool.runtime(name).spec.engine,
        tools_memo=app[state.TOOLS_MEMO],
        ask_memo=app[state.ASK_MEMO],
    ))


def route_headers(plan: RoutedRequest, result: ForwardResult, started: float) -> dict[str, str]:
    """What the client learns of the decision, on the answer's headers (`x-specroute-*`)."""
    overhead = ((result.sent_at or started) - started) * 1000
    return {
        "x-specroute-backend": result.backend or "none",
        "x-specroute-profile": result.profile or plan.decision.profile,
        "x-specroute-class": plan.scores.top_class if plan.scores else "unknown",
        "x-specroute-reason": plan.decision.reason,
        "x-specroute-overhead-ms": f"{overhead:.3f}",
        "x-specroute-request-id": plan.request_id,
        "x-specroute-pool": plan.pool,
        "x-specroute-rewrite": plan.rewrite_header(),
    }


def account(app: web.Application, plan: RoutedRequest, result: ForwardResult,
            started: float) -> None:
    """After the answer: the instances that failed, the conversation's new home (here and, with
    replicas, for the others), and the record, queued to be written with the next batch."""
    deps, pool = app[state.DEPS], app[state.POOL]
    now = deps.clock()
    for name in result.failover_from:
        pool.mark_failed(name, now, result.error or "failed")
    if result.backend and not result.error:
        pool.mark_served(result.backend)
        if 200 <= result.status < 300 and not result.client_disconnected:
            prompt_tokens = result.meter.report.prompt_tokens or plan.features.prompt_tokens
            app[state.SESSIONS].remember(plan.conversation, result.backend, result.profile,
                                         prompt_tokens, now)
            link = app.get(state.REPLICAS)
            if link is not None:  # the next turn may reach another replica
                link.share_turn(plan.conversation, result.backend, result.profile, prompt_tokens)
    # The record is built and written with the others that finish within the next few ms
    # (router/sinks.RecordQueue): the answer has left already.
    app[state.RECORDS].put(functools.partial(
        record_for, plan, result, started=started, ended=now, ts=deps.wall_clock(),
        log_content=app[state.CONFIG].log.content,
    ))
