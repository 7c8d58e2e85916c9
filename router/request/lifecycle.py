"""One routed request's two ends, shared by both front ends (the HTTP proxy, router/edge/handlers,
and the Envoy endpoint picker, router/epp): the plan made from the request's bytes and headers
against the app's core (`router.request.core`, handed in), its start on the way out (`send_begins`), and the bookkeeping once its
answer has left (`settle_and_account`: the engine's counters, pool, conversations, the shared
store, the record). One code path: a request gets the same decision and the same decision-log
record whichever front end took it. And `GET /v1/models`, which both answer themselves.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Collection, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from backends.measure import StreamMeter
from backends.upstream import ForwardResult
from router.instances import spec_counters
from router.request.core import Core
from router.request.errors import RequestError
from router.request.log_record import CONTENT_CAP, record_for
from router.request.routing import Incoming, RoutedRequest, RoutingInputs, plan_request

MODELS_TIMEOUT_S: Final = 10.0


def plan_for(core: Core, endpoint: str, raw: bytes, headers: Mapping[str, str],
             started: float, among: Collection[str] | None = None) -> RoutedRequest:
    """The routing plan for one request, from the app's state now; raises `RequestError`.
    `among`: the only instances it may go to (a gateway's subset), none outside them."""
    deps, pool, sessions, online = core.deps, core.pool, core.sessions, core.online
    backends = pool.states(started)
    if among is not None:
        backends = [b for b in backends if b.name in among]
    snapshot = core.policy.snapshot
    incoming = Incoming(
        endpoint, raw, request_id=deps.new_request_id(),
        header_route=headers.get("x-specroute-route"),
        conversation_hint=headers.get("x-specroute-conversation"),
    )
    return plan_request(incoming, RoutingInputs(
        policy=snapshot.policy,
        model=online.model,
        scorer=core.scorer.current,
        count_tokens=core.count_tokens,
        backends=backends,
        draw=deps.random() if deps.explore else None,
        held_for=lambda key: sessions.get(key, started),
        arms=online.arms,
        engine_of=lambda name: pool.runtime(name).spec.engine,
        tools_memo=core.tools_memo,
        ask_memo=core.ask_memo,
    ))


@dataclass(slots=True)
class Sending:
    """A routed request on its way: what it has done so far, the primary's ticket in the pool,
    and the engine's counters read before it left (None: not watched)."""

    result: ForwardResult
    ticket: int
    counters: spec_counters.CounterWatch | None


async def send_begins(core: Core, session: aiohttp.ClientSession, plan: RoutedRequest,
                      started: float) -> Sending:
    """The request leaves for its primary: the speculative counters of an idle mtp instance
    whose answers carry no draft stats read first (before this request counts as its work)."""
    primary = plan.decision.backend
    counters = (await spec_counters.watch(core.pool, session, primary)
                if spec_counters.wanted(core.pool, primary) else None)
    keep = CONTENT_CAP if core.config.log.content else 0
    result = ForwardResult(meter=StreamMeter(started_at=started, text_cap=keep))
    core.pool.note_losses(plan.decision.losses_ms)
    decision = plan.decision
    ticket = core.pool.begin(primary, decision.service_ms, started, spread=decision.tokens_sd,
                             most_ms=decision.most_ms)
    return Sending(result, ticket, counters)


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


def account(core: Core, plan: RoutedRequest, result: ForwardResult, started: float) -> None:
    """After the answer: the instances that failed, the conversation's new home (here and, with
    replicas, for the others), and the record, queued to be written with the next batch."""
    deps, pool = core.deps, core.pool
    now = deps.clock()
    for name in result.failover_from:
        pool.mark_failed(name, now, result.error or "failed")
    if result.backend and not result.error:
        pool.mark_served(result.backend)
        if 200 <= result.status < 300 and not result.cut_short:
            prompt_tokens = result.meter.report.prompt_tokens or plan.features.prompt_tokens
            core.sessions.remember(plan.conversation, result.backend, result.profile,
                                         prompt_tokens, now)
            for share in core.turn_sharers:  # the next turn may reach another replica
                share(plan.conversation, result.backend, result.profile, prompt_tokens)
    # The record is built and written with the others that finish within the next few ms
    # (router/learning/sinks.RecordQueue): the answer has left already.
    core.records.put(functools.partial(
        record_for, plan, result, started=started, ended=now, ts=deps.wall_clock(),
        log_content=core.config.log.content,
    ))


async def settle_and_account(core: Core, session: aiohttp.ClientSession, plan: RoutedRequest,
                             sending: Sending, started: float) -> None:
    """`account`, after folding in the counters' difference when they were watched (an await:
    shielded, so that a client hanging up now loses no record)."""
    if sending.counters is None:
        account(core, plan, sending.result, started)
    else:
        await _shielded(core, _settle(core, session, plan, sending, started, sending.counters))


async def _settle(core: Core, session: aiohttp.ClientSession, plan: RoutedRequest,
                  sending: Sending, started: float, counters: spec_counters.CounterWatch) -> None:
    result = sending.result
    if not result.cut_short:
        await spec_counters.settle(core.pool, session, counters, result.backend, result.meter)
    account(core, plan, result, started)


async def _shielded(core: Core, work: Coroutine[Any, Any, None]) -> None:
    """Run `work` to the end even if the caller is cancelled meanwhile."""
    task = asyncio.ensure_future(work)
    pending = core.tasks
    pending.add(task)
    task.add_done_callback(pending.discard)
    await asyncio.shield(task)


async def models_listing(core: Core, session: aiohttp.ClientSession) -> dict[str, Any]:
    """`GET /v1/models`: the union of the healthy instances' models, first seen wins, no
    duplicates; a 502 `RequestError` when none answered."""
    pool = core.pool
    now = core.deps.clock()
    targets = pool.targets([s.name for s in pool.states(now) if s.healthy])
    listings = await asyncio.gather(*(_list_models(session, t.base_url, t.api_key) for t in targets))
    merged: dict[str, dict[str, Any]] = {}
    for listing in listings:
        for model in listing:
            merged.setdefault(str(model.get("id")), model)
    if not merged and not any(listings):
        raise RequestError(502, "No backend answered GET /v1/models.", code="all_backends_failed")
    return {"object": "list", "data": list(merged.values())}


async def _list_models(session: aiohttp.ClientSession, base_url: str, api_key: str) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with session.get(
            base_url.rstrip("/") + "/v1/models", headers=headers,
            timeout=aiohttp.ClientTimeout(total=MODELS_TIMEOUT_S),
        ) as response:
            if response.status != 200:
                return []
            data = json.loads(await response.read()).get("data")
    except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError):
        return []
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
