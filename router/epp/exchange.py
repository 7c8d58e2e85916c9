"""One HTTP request as the picker sees it on Envoy's ext_proc stream: its headers and body in,
the choice out; then its answer's headers and body passed through, observed on the way, and
the same bookkeeping and decision-log record as in proxy mode (router/exchange).

The request body comes in FULL_DUPLEX_STREAMED mode: it is buffered to its end (the decision
needs all of it), then the headers' answer (the instances) and the body (as the engine must get
it: rewritten, or with what makes it report its stats) go back together: Envoy routes as soon
as the headers are answered, so that answer waits for the body. Envoy sends the body on chunked
(it drops any content-length), so a rewritten body needs no new length. Envoy needs no
answer per request message in this mode: a message that leaves nothing to send gets none
(each answer is a gRPC write, the largest cost per message here).

The answer's body comes in STREAMED mode: Envoy holds each chunk until it is answered, once,
and the answer is "go on" (no byte sent back) unless the client must get other bytes in its
place: the answer's Server-Sent Events split as the proxy splits them (an event cut between two
chunks waits for its end), minus what the picker itself asked for (`client_view`); a JSON
answer as it is, or whole at its end when what the client gets depends on all of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Final

from aiohttp import web
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from backends.client_view import Added, client_body, client_event
from backends.engines import adapter_for
from backends.measure import StreamMeter
from backends.openai_error import error_body
from backends.sse import SSESplitter, event_json, loads_or_none
from backends.upstream import ForwardResult
from router import state
from router.epp import messages
from router.errors import RequestError
from router.exchange import account, plan_for, route_headers
from router.paths import ROUTED, forwardable_path
from router.records import CONTENT_CAP
from router.routing import RoutedRequest
from router.upstream_body import upstream_body

Responses = list[ext_proc.ProcessingResponse]
# Request headers the engine must not see: the client's words to specroute.
_OURS: Final = ("x-specroute-route", "x-specroute-conversation")


def endpoint_of(base_url: str) -> str:
    """`http://10.0.0.7:8000` -> `10.0.0.7:8000`: how Envoy names an instance."""
    rest = base_url.split("://", 1)[-1]
    return rest.split("/", 1)[0]


@dataclass
class Exchange:
    """The state of one request on the stream."""

    app: web.Application
    fallbacks: bool = True  # name the other allowed instances after the chosen one
    started: float = 0.0
    path: str = ""
    endpoint: str = ""  # the routed API ("chat", ...), "" for a path sent to the default
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    plan: RoutedRequest | None = None
    result: ForwardResult | None = None
    added: Added = field(default_factory=Added)
    ticket: int = 0
    sse: bool = False
    splitter: SSESplitter = field(default_factory=SSESplitter)
    answer: bytearray = field(default_factory=bytearray)  # a JSON answer, kept to be read
    done: bool = False

    def on(self, message: ext_proc.ProcessingRequest) -> Responses:
        kind = message.WhichOneof("request")
        if kind == "request_headers":
            return self._request_headers(message.request_headers)
        if kind == "request_body":
            return self._request_body(message.request_body)
        if kind == "request_trailers":  # the body ended with trailers, not end_of_stream
            decided = self._decide(end_of_stream=False) if self._waiting() else []
            return [*decided, messages.trailers(request=True)]
        if kind == "response_headers":
            return self._response_headers(message)
        if kind == "response_body":
            return self._response_body(message.response_body)
        if kind == "response_trailers":  # the answer ended with trailers, not end_of_stream
            # Its chunks are all answered by now: what the picker held back (an event cut
            # short, a body edited whole) has nowhere to go. Not over HTTP/1: Envoy's codec
            # passes no trailers from the instances on.
            if self.result is not None:
                self._answer_end()
            self.finish()
            return [messages.trailers(request=False)]
        return []

    # --- the request ------------------------------------------------------------------------

    def _request_headers(self, headers: ext_proc.HttpHeaders) -> Responses:
        app = self.app
        self.started = app[state.DEPS].clock()
        self.headers = messages.header_map(headers)
        self.path = self.headers.get(":path", "/").split("?", 1)[0]
        self.endpoint = ROUTED.get(self.path, "")
        if not self.endpoint:  # as the proxy's passthrough: the default instance, unrecorded
            return [self._to_default()]
        if headers.end_of_stream:  # a routed path with no body: the proxy's 400
            return self._decide()
        return []  # the answer waits for the whole body

    def _waiting(self) -> bool:
        """A routed request whose answer waits for the rest of its body."""
        return bool(self.endpoint) and self.plan is None and not self.done

    def _request_body(self, body: ext_proc.HttpBody) -> Responses:
        if not self._waiting():
            return [messages.request_body(body.body, body.end_of_stream)]
        self.body += body.body
        limit = self.app[state.CONFIG].limits.max_body_mb * 2**20
        if len(self.body) > limit:
            self.done = True
            return [_error(413, f"Request body too large: over {limit:.0f} bytes.",
                           "body_too_large")]
        return self._decide() if body.end_of_stream else []

    def _decide(self, end_of_stream: bool = True) -> Responses:
        app = self.app
        raw = bytes(self.body)
        try:
            plan = plan_for(app, self.endpoint, raw, self.headers, self.started)
        except RequestError as exc:
            self.done = True
            return [_error(exc.status, exc.message, exc.code, exc.param)]
        pool = app[state.POOL]
        primary = plan.decision.backend
        if not primary:
            self.done = True
            return [_error(503, "No healthy instance can serve the request.", "no_backend")]
        spec = pool.runtime(primary).spec
        sent, tweaked = upstream_body(plan, raw, adapter_for(spec), self.path)
        self.plan, self.added = plan, Added(usage=tweaked.added_usage,
                                            meta_info=tweaked.added_meta_info)
        keep = CONTENT_CAP if app[state.CONFIG].log.content else 0
        self.result = ForwardResult(meter=StreamMeter(started_at=self.started, text_cap=keep),
                                    backend=primary, profile=spec.profile)
        self.ticket = pool.begin(primary, plan.decision.service_ms, self.started)
        self.result.sent_at = app[state.DEPS].clock()
        order = plan.order if self.fallbacks else plan.order[:1]
        endpoints = [endpoint_of(t.base_url) for t in pool.targets(order)]
        set_headers = {"authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
        return [messages.picked(endpoints, set_headers, _OURS),
                messages.request_body(sent, end_of_stream)]

    def _to_default(self) -> ext_proc.ProcessingResponse:
        app = self.app
        pool, config = app[state.POOL], app[state.CONFIG]
        if forwardable_path(self.path) is None:
            self.done = True
            return _error(404, "Unknown path.", "not_found")
        order = pool.default_order(config.default_backend_name, self.started)
        order = order if self.fallbacks else order[:1]
        endpoints = [endpoint_of(t.base_url) for t in pool.targets(order)]
        return messages.picked(endpoints, {}, _OURS)

    # --- the answer -------------------------------------------------------------------------

    def _response_headers(self, message: ext_proc.ProcessingRequest) -> Responses:
        result, plan = self.result, self.plan
        if result is None or plan is None:
            return [messages.response_headers({})]
        headers = messages.header_map(message.response_headers)
        result.status = int(headers.get(":status", "0") or 0)
        self.sse = headers.get("content-type", "").startswith("text/event-stream")
        if messages.envoy_answered(message):  # the instance named did not answer: it failed
            self._served("")
        else:
            self._served(messages.served_endpoint(message))
        responses = [messages.response_headers(route_headers(plan, result, self.started))]
        if message.response_headers.end_of_stream:
            self.finish()
        return responses

    def _served(self, endpoint: str) -> None:
        """Envoy went down the list: the instance that answered, and those it passed. None
        answered (Envoy's own 503: refused, unreachable): the chosen one failed."""
        result, plan = self.result, self.plan
        if result is None or plan is None:
            return
        if not endpoint:
            if result.status >= 500:
                result.failover_from.append(result.backend)
                result.error = f"{result.backend}: no instance answered (Envoy's {result.status})"
                result.backend = ""
            return
        pool = self.app[state.POOL]
        for name in plan.order:
            spec = pool.runtime(name).spec
            if endpoint_of(spec.base_url) == endpoint:
                if name != result.backend:
                    result.failover_from.append(result.backend)
                    result.backend, result.profile = name, spec.profile
                return

    def _response_body(self, body: ext_proc.HttpBody) -> Responses:
        """STREAMED: Envoy holds each chunk until its answer, which lets it go on as it is
        (most chunks: no byte echoed) or puts what the client gets in its place."""
        chunk = body.body
        if self.result is None:
            return [messages.RESPONSE_BODY_CONTINUE]
        if self.sse:
            out = self._events(chunk, self.app[state.DEPS].clock())
        else:
            self.answer += chunk  # a copy to read at the end
            # what the client gets depends on the whole answer (`meta_info`): all at the end
            out = b"" if self.added.meta_info else chunk
        if body.end_of_stream:
            out += self._answer_end()
            self.finish()
        return [messages.response_chunk(chunk, out)]

    def _answer_end(self) -> bytes:
        """The answer ended: what is still to go to the client, and its last observation."""
        assert self.result is not None
        if self.sse:
            return self.splitter.flush()
        whole = bytes(self.answer)
        payload = loads_or_none(whole)
        self.result.meter.observe(payload, self.app[state.DEPS].clock())
        return client_body(whole, payload, self.added) if self.added.meta_info else b""

    def _events(self, chunk: bytes, now: float) -> bytes:
        assert self.result is not None
        kept = []
        for raw in self.splitter.feed(chunk):
            payload = event_json(raw)
            self.result.meter.observe(payload, now)
            event = client_event(raw, payload, self.added)
            if event is not None:
                kept.append(event)
        return b"".join(kept)

    def finish(self, *, cut_short: bool = False) -> None:
        """The request is over: release the instance and account for it, once."""
        if self.done or self.plan is None or self.result is None:
            self.done = True
            return
        self.done = True
        if cut_short:  # the stream ended before the answer did: the client, or Envoy, left
            self.result.client_disconnected = True
        self.app[state.POOL].end(self.plan.decision.backend, self.ticket)
        account(self.app, self.plan, self.result, self.started)


def _error(status: int, message: str, code: str, param: str | None = None) -> (
        ext_proc.ProcessingResponse):
    body = json.dumps(error_body(status, message, param=param, code=code)).encode()
    return messages.immediate(status, body, {"content-type": "application/json"})
