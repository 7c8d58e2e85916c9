"""One HTTP request as the picker sees it on Envoy's ext_proc stream: its headers and body in,
the choice out; then its answer's headers and body passed through, observed on the way, and
the same bookkeeping and decision-log record as in proxy mode (router/request/lifecycle).

The request body comes in FULL_DUPLEX_STREAMED mode: it is buffered to its end (the decision
needs all of it), then the headers' answer (the instances) and the body (as the engine must get
it: decoded, rewritten, or with what makes it report its stats) go back together: Envoy routes
as soon as the headers are answered, so that answer waits for the body. Envoy sends the body on
chunked (it drops any content-length), so a rewritten body needs no new length. Envoy needs no
answer per request message in this mode: a message that leaves nothing to send gets none
(each answer is a gRPC write, the largest cost per message here). What the proxy answers
itself (a method a path does not take, a body it cannot read, `GET /v1/models`) is answered
here as an immediate response, built by the same code.

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

from aiohttp import compression_utils, web
from aiohttp.http_exceptions import ContentEncodingError
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from backends.client_view import Added, client_events, observed_body
from backends.engines import adapter_for
from backends.openai_error import error_body
from backends.sse import SSESplitter, is_event_stream
from backends.upstream import Target, engine_headers, withheld
from router import state
from router.edge.paths import MODELS, ROUTED, forwardable_path, refused_method
from router.epp import messages
from router.instances.pool import POOL
from router.request.core import CORE
from router.request.errors import (
    RequestError,
    body_too_large,
    method_not_allowed,
    parse_error,
    unreadable_body,
)
from router.request.lifecycle import (
    Sending,
    models_listing,
    plan_for,
    route_headers,
    send_begins,
    settle_and_account,
)
from router.request.routing import RoutedRequest
from router.request.upstream_body import upstream_body

Responses = list[ext_proc.ProcessingResponse]
# The Content-Encodings aiohttp's parser undoes for the proxy; any other reaches it as sent.
_DECODED: Final = frozenset({"gzip", "deflate", "br", "zstd"})


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
    subset: frozenset[str] | None = None  # the gateway's subset hint: `ip:port`s, None for any
    body: bytearray = field(default_factory=bytearray)
    plan: RoutedRequest | None = None
    sending: Sending | None = None
    named: list[Target] = field(default_factory=list)  # the instances Envoy was given, in order
    added: Added = field(default_factory=Added)
    content_type: str = ""  # the answer's
    sse: bool = False
    splitter: SSESplitter = field(default_factory=SSESplitter)
    answer: bytearray = field(default_factory=bytearray)  # a JSON answer, kept to be read
    answered: bool = False  # the answer is all in: `finish` is due
    done: bool = False

    async def on(self, message: ext_proc.ProcessingRequest) -> Responses:
        kind = message.WhichOneof("request")
        if kind == "request_headers":
            self.subset = messages.endpoint_subset(message)
            return await self._request_headers(message.request_headers)
        if kind == "request_body":
            return await self._request_body(message.request_body)
        if kind == "request_trailers":  # the body ended with trailers, not end_of_stream
            decided = await self._decide(end_of_stream=False) if self._waiting() else []
            return [*decided, messages.trailers(request=True)]
        if kind == "response_headers":
            return self._response_headers(message)
        if kind == "response_body":
            return self._response_body(message.response_body)
        if kind == "response_trailers":  # the answer ended with trailers, not end_of_stream
            # Its chunks are all answered by now: what the picker held back (an event cut
            # short, a body edited whole) has nowhere to go. Not over HTTP/1: Envoy's codec
            # passes no trailers from the instances on.
            if self.sending is not None:
                self._answer_end()
            self.answered = True
            return [messages.trailers(request=False)]
        return []

    # --- the request ------------------------------------------------------------------------

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
        return []  # the answer waits for the whole body

    def _waiting(self) -> bool:
        """A routed request whose answer waits for the rest of its body."""
        return bool(self.endpoint) and self.plan is None and not self.done

    async def _request_body(self, body: ext_proc.HttpBody) -> Responses:
        if not self._waiting():
            return [messages.request_body(body.body, body.end_of_stream)]
        self.body += body.body
        limit = self.app[state.CONFIG].limits.max_body_bytes
        if len(self.body) > limit:  # as sent: decoded, it is bounded again
            return self._refuse(body_too_large(limit))
        return await self._decide() if body.end_of_stream else []

    async def _decide(self, end_of_stream: bool = True) -> Responses:
        app = self.app
        try:
            raw = decoded_body(bytes(self.body), self.headers.get("content-encoding", ""),
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
        self.added = Added(usage=tweaked.added_usage, meta_info=tweaked.added_meta_info)
        sending = await send_begins(app[CORE], app[state.SESSION], plan, self.started)
        self.named = pool.targets(plan.order if self.fallbacks else plan.order[:1])
        sending.result.trying(self.named[0])
        sending.result.sent_at = app[state.DEPS].clock()
        self.plan, self.sending = plan, sending
        remove, set_headers = self._for_engine(spec.api_key, decoded=True)
        return [messages.picked([endpoint_of(t.base_url) for t in self.named], set_headers,
                                remove),
                messages.request_body(sent, end_of_stream)]

    def _allowed(self) -> list[str] | None:
        """The instances the gateway's subset hint names (None: no hint, any instance)."""
        if self.subset is None:
            return None
        pool = self.app[POOL]
        return [name for name in pool.names
                if endpoint_of(pool.runtime(name).spec.base_url) in self.subset]

    def _for_engine(self, api_key: str, *, decoded: bool) -> tuple[list[str], dict[str, str]]:
        """The header mutation that gives the engine the proxy's headers (backends/upstream):
        what it withholds removed (Envoy frames the request itself: its pseudo-headers stay),
        what it sets set. A body sent on as the client encoded it keeps its Content-Encoding."""
        remove = [name for name in self.headers if not name.startswith(":") and withheld(name)
                  and (decoded or name != "content-encoding")]
        return remove, {k.lower(): v for k, v in engine_headers(api_key).items()}

    def _to_default(self) -> ext_proc.ProcessingResponse:
        app = self.app
        pool, config = app[POOL], app[state.CONFIG]
        if forwardable_path(self.path) is None:
            self.done = True
            return _error(RequestError(404, "Unknown path.", code="not_found"))
        order = pool.default_order(config.default_backend_name, self.started)
        targets = pool.targets(order)
        if self.subset is not None:  # the gateway's subset hint: only those
            targets = [t for t in targets if endpoint_of(t.base_url) in self.subset]
            if not targets:
                self.done = True
                return _error(RequestError(
                    503, "No instance of the gateway's subset can serve the request.",
                    code="no_backend"))
        targets = targets if self.fallbacks else targets[:1]
        remove, set_headers = self._for_engine(targets[0].api_key if targets else "",
                                               decoded=False)
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

    # --- the answer -------------------------------------------------------------------------

    def _response_headers(self, message: ext_proc.ProcessingRequest) -> Responses:
        sending, plan = self.sending, self.plan
        if sending is None or plan is None:
            return [messages.response_headers({})]
        headers = messages.header_map(message.response_headers)
        self.content_type = headers.get("content-type", "")
        self.sse = is_event_stream(self.content_type)
        self._served(messages.served_endpoint(message), int(headers.get(":status", "0") or 0),
                     by_envoy=messages.envoy_answered(message))
        responses = [messages.response_headers(route_headers(plan, sending.result,
                                                             self.started))]
        if message.response_headers.end_of_stream:
            self.answered = True
        return responses

    def _served(self, endpoint: str, status: int, *, by_envoy: bool) -> None:
        """Envoy went down the list as `forward` does: each instance before the one that
        answered could not serve it. Envoy's own answer (refused, reset, unreachable): each
        one up to the last it tried (all, when it does not say) failed."""
        assert self.sending is not None
        result, named = self.sending.result, self.named
        ends = [endpoint_of(t.base_url) for t in named]
        at = ends.index(endpoint) if endpoint in ends else None
        if by_envoy and status >= 500:
            for target in named[:len(named) if at is None else at + 1]:
                result.trying(target)
                result.passed(f"no instance answered (Envoy's {status})")
            result.status = status
            return
        if at is not None:  # else: not one it was given, or Envoy's own 4xx: as it is
            for target in named[:at]:
                result.trying(target)
                result.passed("Envoy went on to the next instance")
            result.trying(named[at])
        result.took(status)

    def _response_body(self, body: ext_proc.HttpBody) -> Responses:
        """STREAMED: Envoy holds each chunk until its answer, which lets it go on as it is
        (most chunks: no byte echoed) or puts what the client gets in its place."""
        chunk = body.body
        if self.sending is None:
            return [messages.RESPONSE_BODY_CONTINUE]
        if self.sse:
            out = client_events(self.splitter, chunk, self.sending.result.meter, self.added,
                                self.app[state.DEPS].clock())
        else:
            self.answer += chunk  # a copy to read at the end
            # what the client gets depends on the whole answer (`meta_info`): all at the end
            out = b"" if self.added.meta_info else chunk
        if body.end_of_stream:
            out += self._answer_end()
            self.answered = True
        return [messages.response_chunk(chunk, out)]

    def _answer_end(self) -> bytes:
        """The answer ended: what is still to go to the client, and its last observation."""
        assert self.sending is not None
        if self.sse:
            return self.splitter.flush()
        out = observed_body(bytes(self.answer), self.content_type, self.sending.result.meter,
                            self.added, self.app[state.DEPS].clock())
        return out if self.added.meta_info else b""  # else its chunks went on as they were

    def complete(self) -> bool:
        """Whether the answer reached its end: Envoy said so, or the stream's last event went
        on to the client. A client that stops reading there (the openai SDK does, at `[DONE]`)
        may hang up before the engine's closing chunk passes; Envoy then resets the stream
        with the answer whole at the client (seen in `specroute demo --front envoy`)."""
        return self.answered or (self.sending is not None and self.sending.result.meter.ended)

    async def finish(self, *, cut_short: bool = False) -> None:
        """The request is over: release the instance and account for it, once. Cut short,
        the stream ended before the answer did, and which end cut it Envoy does not say: it
        resets or closes the stream alike when the instance's answer breaks off and when the
        client leaves (Envoy 1.40, both seen for each). Recorded as the proxy records a client
        that left: never timed, never the conversation's home."""
        if self.done:
            return
        self.done = True
        plan, sending = self.plan, self.sending
        if plan is None or sending is None:
            return
        if cut_short:
            sending.result.client_disconnected = True
        self.app[POOL].end(plan.decision.backend, sending.ticket, self.app[state.DEPS].clock())
        await settle_and_account(self.app[CORE], self.app[state.SESSION], plan, sending,
                                 self.started)


def decoded_body(raw: bytes, content_encoding: str, limit: int) -> bytes:
    """The body as the proxy reads it: Envoy passes it on as the client encoded it, aiohttp
    decodes it for the proxy (with its own decompressors, used here too) up to `limit`."""
    encoding = content_encoding.lower()
    if encoding not in _DECODED or not raw:
        return raw
    decompressor = _decompressor(encoding, raw)
    try:
        body = decompressor.decompress_sync(raw, max_length=limit + 1)
    except Exception as exc:  # whatever the codec raises: not what it says
        raise unreadable_body(ContentEncodingError.__name__) from exc
    if len(body) > limit:
        raise body_too_large(limit)
    if encoding == "deflate" and not getattr(decompressor, "eof", True):  # cut short
        raise unreadable_body(ContentEncodingError.__name__)
    return body


def _decompressor(encoding: str, raw: bytes) -> compression_utils.DecompressionBaseHandler:
    """aiohttp's decompressor for `encoding`; where it has none (a codec not installed), the
    proxy's server refuses the request as unparsable: so here."""
    if encoding == "br":
        if not compression_utils.HAS_BROTLI:
            raise parse_error(400, ContentEncodingError(encoding))
        return compression_utils.BrotliDecompressor()
    if encoding == "zstd":
        if not compression_utils.HAS_ZSTD:
            raise parse_error(400, ContentEncodingError(encoding))
        return compression_utils.ZSTDDecompressor()
    # aiohttp reads "deflate" that lacks its zlib header as raw deflate, as browsers send it
    raw_deflate = encoding == "deflate" and raw[0] & 0xF != 8
    return compression_utils.ZLibDecompressor(encoding=encoding,
                                              suppress_deflate_header=raw_deflate)


def _error(exc: RequestError) -> ext_proc.ProcessingResponse:
    body = json.dumps(error_body(exc.status, exc.message, param=exc.param, code=exc.code))
    headers = {"content-type": "application/json",
               **{k.lower(): v for k, v in exc.headers.items()}}
    return messages.immediate(exc.status, body.encode(), headers)
