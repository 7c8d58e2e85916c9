"""The request on Envoy's `specroute.pick` stream: its headers and body in, the choice out, in
one wait.

Envoy sends the headers and then the body's chunks without waiting for an answer (STREAMED,
`send_body_without_waiting_for_header_response`), and routes as soon as the headers are
answered: so that answer waits for the body's end (the decision needs all of it), then the
headers' answer (the instances, the exchange's metadata) and one answer per chunk go back
together. A chunk's answer is "go on as it is" (no byte echoed) unless the engine must get other
bytes (decoded, rewritten, or with what makes it report its stats): then the chunks before the
last are cleared and the last carries the whole body (Envoy sends it on chunked; the client's
Content-Length is withheld as the proxy withholds it). What the proxy answers itself (a method
a path does not take, a body it cannot read, `GET /v1/models`) is answered here as an immediate
response, built by the same code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from backends.client_view import Added
from backends.engines import adapter_for
from backends.openai_error import error_body
from router import state
from router.edge.paths import MODELS, ROUTED, forwardable_path, refused_method
from router.epp import messages
from router.epp.exchange import Exchange, Exchanges, decoded_body, endpoint_of
from router.instances.pool import POOL
from router.request.core import CORE
from router.request.errors import RequestError, body_too_large, method_not_allowed
from router.request.lifecycle import models_listing, plan_for, route_headers, send_begins
from router.request.routing import RoutedRequest
from router.request.upstream_body import upstream_body

Responses = list[ext_proc.ProcessingResponse]
_FULL_DUPLEX = ProcessingMode.FULL_DUPLEX_STREAMED
_NONE = ProcessingMode.NONE
# How the pick tells Envoy's route whether the answer has bytes the client must not get (what
# the picker asked the engine for): such an answer goes through `specroute.edit`.
EDITED = "edited"
WATCHED = "watched"


@dataclass
class Pick:
    """The state of one request's pick stream."""

    app: web.Application
    exchanges: Exchanges
    fallbacks: bool = True  # name the other allowed instances after the chosen one
    started: float = 0.0
    path: str = ""
    endpoint: str = ""  # the routed API ("chat", ...), "" for a path sent to the default
    headers: dict[str, str] = field(default_factory=dict)
    subset: frozenset[str] | None = None  # the gateway's subset hint: `ip:port`s, None for any
    body: bytearray = field(default_factory=bytearray)
    chunks: int = 0  # body messages held, each owed an answer after the headers'
    passing: bool = False  # the headers are answered: each chunk goes on as it comes
    done: bool = False  # answered whole (picked, or answered by the picker itself)
    # How Envoy's filter is set (its first message says): the body echoed back whole
    # (FULL_DUPLEX_STREAMED, a gateway's own filter) or answered chunk by chunk (STREAMED);
    # the answer sent on this stream too (one filter) or to a watcher (deploy/envoy's three).
    duplex: bool = False
    answers_here: bool = False
    request_ended: bool = False  # Envoy sent the request's last message
    exchange: Exchange | None = None  # picked, routed

    @property
    def finished(self) -> bool:
        """Nothing more on this stream needs an answer: the request is answered whole (the
        chunks of one passed on, to its end) and its answer goes to another filter's stream."""
        return self.done and not self.answers_here and (self.request_ended or not self.passing)

    async def on(self, message: ext_proc.ProcessingRequest) -> Responses:
        kind = message.WhichOneof("request")
        self.request_ended = self.request_ended or messages.ends_its_side(message)
        if kind == "request_headers":
            self.subset = messages.endpoint_subset(message)
            modes = message.protocol_config
            self.duplex = modes.request_body_mode == _FULL_DUPLEX
            self.answers_here = modes.response_body_mode != _NONE
            return await self._request_headers(message.request_headers)
        if kind == "request_body":
            return await self._request_body(message.request_body)
        if kind == "request_trailers":  # the body ended with trailers, not end_of_stream
            decided = await self._decide(trailers=True) if self._waiting() else []
            return [*decided, messages.trailers(request=True)]
        return []

    def _waiting(self) -> bool:
        """A routed request whose answer waits for the rest of its body."""
        return bool(self.endpoint) and not self.done

    async def _request_headers(self, headers: ext_proc.HttpHeaders) -> Responses:
        app = self.app
        self.started = app[state.DEPS].clock()
        self.headers = messages.header_map(headers)
        self.path = self.headers.get(":path", "/").split("?", 1)[0]
        method = self.headers.get(":method", "GET")
        allow = refused_method(method, self.path)
        if allow is not None:
            return self._refuse(method_not_allowed(method, self.path, allow))
        if self.path == MODELS:
            return await self._models()
        self.endpoint = ROUTED.get(self.path, "")
        if not self.endpoint:  # as the proxy's passthrough: the default instance, unrecorded
            return [self._to_default()]
        if headers.end_of_stream:  # a routed path with no body: the proxy's 400
            return await self._decide()
        limit = app[state.CONFIG].limits.max_body_bytes
        declared = self.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:  # refused before a byte is read
            return self._refuse(body_too_large(limit))
        return []  # the answer waits for the whole body

    async def _request_body(self, body: ext_proc.HttpBody) -> Responses:
        if self.passing:
            if self.duplex:
                return [messages.request_body_streamed(body.body, body.end_of_stream)]
            return [messages.REQUEST_BODY_CONTINUE]
        if not self._waiting():  # answered already (an immediate response): nothing goes on
            return []
        self.body += body.body
        self.chunks += 1
        limit = self.app[state.CONFIG].limits.max_body_bytes
        if len(self.body) > limit:  # as sent: decoded, it is bounded again
            return self._refuse(body_too_large(limit))
        return await self._decide() if body.end_of_stream else []

    async def _decide(self, *, trailers: bool = False) -> Responses:
        app = self.app
        received = bytes(self.body)
        try:
            raw = decoded_body(received, self.headers.get("content-encoding", ""),
                               app[state.CONFIG].limits.max_body_bytes)
            plan = plan_for(app[CORE], self.endpoint, raw, self.headers, self.started,
                            among=self._allowed())
        except RequestError as exc:
            return self._refuse(exc)
        pool = app[POOL]
        primary = plan.decision.backend
        if not primary:
            return self._refuse(RequestError(503, "No healthy instance can serve the request.",
                                             code="no_backend"))
        spec = pool.runtime(primary).spec
        sent, tweaked = upstream_body(plan, raw, adapter_for(spec), self.path)
        added = Added(usage=tweaked.added_usage, meta_info=tweaked.added_meta_info)
        sending = await send_begins(app[CORE], app[state.SESSION], plan, self.started)
        named = pool.targets(plan.order if self.fallbacks else plan.order[:1])
        sending.result.trying(named[0])
        sending.result.sent_at = app[state.DEPS].clock()
        self.done = True
        self.exchange = exchange = Exchange(app, self.started, plan, sending, named, added)
        # one filter: its answer comes here, on this stream; else to the watcher, by this id
        ours = {"exchange": "" if self.answers_here else self.exchanges.open(exchange),
                "answer": EDITED if added.usage or added.meta_info else WATCHED,
                "strip": ",".join(k for k, on in (("usage", added.usage),
                                                   ("meta_info", added.meta_info)) if on)}
        remove, set_headers = messages.for_engine(self.headers, spec.api_key, decoded=True)
        picked = messages.picked([endpoint_of(t.base_url) for t in named], set_headers, remove,
                                 ours, route_headers(plan, sending.result, self.started),
                                 receipt(plan))
        return [picked, *self._chunk_answers(sent, received, trailers)]

    def _chunk_answers(self, sent: bytes, received: bytes, trailers: bool) -> Responses:
        """One answer per body chunk held: each goes on as it is when the engine gets the
        client's bytes, else the last carries what it gets instead and the others nothing.
        FULL_DUPLEX_STREAMED: the whole body, once."""
        if self.duplex:
            return [messages.request_body_streamed(sent, end_of_stream=not trailers)]
        if sent == received:
            return [messages.REQUEST_BODY_CONTINUE] * self.chunks
        if not self.chunks:
            return []
        return [*[messages.REQUEST_BODY_CLEARED] * (self.chunks - 1), messages.request_body(sent)]

    def _allowed(self) -> list[str] | None:
        """The instances the gateway's subset hint names (None: no hint, any instance)."""
        if self.subset is None:
            return None
        pool = self.app[POOL]
        return [name for name in pool.names
                if endpoint_of(pool.runtime(name).spec.base_url) in self.subset]

    def _to_default(self) -> ext_proc.ProcessingResponse:
        app = self.app
        pool, config = app[POOL], app[state.CONFIG]
        self.done = True
        if forwardable_path(self.path) is None:
            return _error(RequestError(404, "Unknown path.", code="not_found"))
        order = pool.default_order(config.default_backend_name, self.started)
        targets = pool.targets(order)
        if self.subset is not None:  # the gateway's subset hint: only those
            targets = [t for t in targets if endpoint_of(t.base_url) in self.subset]
            if not targets:
                return _error(RequestError(
                    503, "No instance of the gateway's subset can serve the request.",
                    code="no_backend"))
        targets = targets if self.fallbacks else targets[:1]
        remove, set_headers = messages.for_engine(
            self.headers, targets[0].api_key if targets else "", decoded=False)
        self.passing = True
        return messages.picked([endpoint_of(t.base_url) for t in targets], set_headers, remove)

    async def _models(self) -> Responses:
        """`GET /v1/models` answered here, as the proxy answers it: every instance's list."""
        try:
            listing = await models_listing(self.app[CORE], self.app[state.SESSION])
        except RequestError as exc:
            return self._refuse(exc)
        self.done = True
        return [messages.immediate(200, json.dumps(listing).encode(),
                                   {"content-type": "application/json"})]

    def _refuse(self, exc: RequestError) -> Responses:
        self.done = True
        return [_error(exc)]


def receipt(plan: RoutedRequest) -> dict[str, Any]:
    """The decision in brief, for Envoy's access log: the instance chosen, why, and each
    candidate's predicted finish (ms; none where a pin decided without pricing them)."""
    decision = plan.decision
    return {"request_id": plan.request_id, "chosen": decision.backend,
            "spec": decision.config or decision.profile, "reason": decision.reason,
            "rule": decision.rule,
            "class": plan.scores.top_class if plan.scores else "unknown",
            "finish_ms": {name: round(ms, 1) for name, ms in decision.finish_ms.items()}}


def _error(exc: RequestError) -> ext_proc.ProcessingResponse:
    body = json.dumps(error_body(exc.status, exc.message, param=exc.param, code=exc.code))
    headers = {"content-type": "application/json",
               **{k.lower(): v for k, v in exc.headers.items()}}
    return messages.immediate(exc.status, body.encode(), headers)
