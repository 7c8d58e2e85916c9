"""The upstream client: forward one request, fail over before the first byte, relay as it comes.

Edge code (aiohttp client and server). The rules:
- Targets are tried in order. A refused connection, a timeout, a status by which an engine says
  it cannot serve now (502, 503, 504, 529: `BACKEND_FAILED_STATUSES`), or a body that breaks
  before its first byte moves on to the next target: nothing has reached the client yet, so
  nothing is lost, and the caller marks that backend failed. A connection the backend closes
  before answering is first retried once on the same backend (a stale keep-alive connection is
  not an outage).
- Any other answer is the backend's answer to this request and is relayed as it is: a 4xx is
  the client's own error, and so, as a rule, is a 500 (llama-server answers a wrongly typed
  field such as `"temperature": "hot"` with a 500). Neither counts against the backend's
  health: otherwise any client could knock the backends out with bad requests. An engine that
  is really broken says so on its health endpoint, which the supervisor probes.
- Once bytes have reached the client there is no retry: an upstream failure ends the stream with
  an OpenAI-style error event.
- Bytes are relayed unchanged and as they arrive (SSE event by event, so that what the proxy
  itself asked for can be dropped: `backends.client_view`), comment lines such as `: prefill`
  included, with no read timeout while the backend is still sending. A client that goes away
  closes the upstream connection, which cancels the request on the backend.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from backends.client_view import Added, client_events, observed_body
from backends.measure import StreamMeter
from backends.openai_error import error_body, error_event
from backends.sse import SSESplitter, is_event_stream

Clock = Callable[[], float]

# Headers that describe one hop, not the message (RFC 9110 7.6.1), plus those we recompute.
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
        "Transfer-Encoding", "Upgrade", "Host", "Content-Length",
    )
)
# The proxy sends the body it read, already decoded (aiohttp undoes Content-Encoding), and asks
# for the backend's bytes as they are.
RECODED = frozenset({"accept-encoding", "content-encoding"})
# The client's words to specroute (`x-specroute-route`, ...): never the engine's business.
OURS_PREFIX = "x-specroute-"
_UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
_CLIENT_GONE = (ConnectionResetError, aiohttp.ClientConnectionResetError, ConnectionError)
# The backend closed the connection before answering (not: refused to connect).
_DROPPED_UNANSWERED = (aiohttp.ServerDisconnectedError, aiohttp.ClientConnectionResetError)
# Statuses that mean "this backend cannot serve now" (gateway errors, loading or overloaded
# engines: llama-server and vLLM answer 503, overloaded APIs 529), not "this request is bad".
BACKEND_FAILED_STATUSES = frozenset({502, 503, 504, 529})


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    profile: str
    base_url: str
    api_key: str = ""
    spec: str = ""  # its speculation config's key (backends.spec `spec_key`)


@dataclass(slots=True)
class ForwardResult:
    """What happened, for the decision log."""

    meter: StreamMeter
    backend: str = ""
    profile: str = ""
    spec: str = ""
    status: int = 0
    error: str = ""
    failover_from: list[str] = field(default_factory=list)
    client_disconnected: bool = False
    unobserved: bool = False  # its end was not seen (the picker stopped while it ran)
    sent_at: float | None = None  # when the first attempt left the proxy
    # the batch it ran in on the primary (`BackendPool.end`): requests served at once there when
    # it was sent, and their mean over its life (None: not known, or another instance served it)
    batch_start: int | None = None
    batch_mean: float | None = None

    @property
    def cut_short(self) -> bool:
        """Whether the answer's end is unknown or not the engine's: never timed, never a
        conversation's home."""
        return self.client_disconnected or self.unobserved

    def ran_in(self, primary: str, batch: tuple[int, float] | None) -> None:
        """The batch the request ran in on `primary` (`BackendPool.end`), kept when that
        instance is the one that served it."""
        if batch is not None and self.backend == primary:
            self.batch_start, self.batch_mean = int(batch[0]), round(float(batch[1]), 3)

    def trying(self, target: Target) -> None:
        self.backend, self.profile, self.spec = target.name, target.profile, target.spec

    def passed(self, why: str) -> None:
        """The target being tried could not serve it (before the first byte): the next one is
        tried, and the caller marks this one failed (`failover_from`)."""
        self.failover_from.append(self.backend)
        self.error = f"{self.backend}: {why}"
        self.backend = self.profile = self.spec = ""

    def took(self, status: int) -> None:
        """The target being tried answered with `status`: its answer is the request's."""
        self.status = status
        self.error = ""

    def broke(self, why: str) -> None:
        """The answer broke off after its first bytes: an upstream failure, not the client's."""
        self.error = f"{self.backend}: stream broke: {why}"


@dataclass(frozen=True, slots=True)
class ForwardOptions:
    connect_timeout_s: float = 10.0
    first_byte_timeout_s: float = 0.0  # 0: wait forever (prefills can take minutes)
    strip_usage: bool = False  # drop the include_usage chunk the proxy asked for
    strip_meta_info: bool = False  # drop the SGLang meta_info the proxy asked for

    @property
    def added(self) -> Added:
        return Added(usage=self.strip_usage, meta_info=self.strip_meta_info)


HeaderHook = Callable[["ForwardResult"], Mapping[str, str]]
# Called once the engine's answer is all in, before its end leaves for the client.
AnsweredHook = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Outbound:
    """One request on its way upstream: the client's request it answers, the session it goes
    through, the targets in failover order, the path and body sent, the clock, the options,
    and the caller's hooks. `response_headers(result)` adds headers to the client's response
    once the backend is known; `answered()` is awaited when the engine's answer is all in,
    before its last bytes go to the client (not when the answer broke off)."""

    request: web.Request
    session: aiohttp.ClientSession
    targets: Sequence[Target]
    path: str
    body: bytes | None
    clock: Clock
    options: ForwardOptions = ForwardOptions()
    response_headers: HeaderHook | None = None
    answered: AnsweredHook | None = None


async def forward(outbound: Outbound, result: ForwardResult) -> web.StreamResponse:
    """Send the body to the first target that takes it; relay its answer to the client.

    `result` is the caller's, filled as the request goes, so that a caller cancelled midway
    (the client hung up) still knows which backend served what.
    """
    request, session, targets, path, body = (outbound.request, outbound.session,
                                             outbound.targets, outbound.path, outbound.body)
    clock, options = outbound.clock, outbound.options
    response_headers, answered = outbound.response_headers, outbound.answered
    for index, target in enumerate(targets):
        last = index == len(targets) - 1
        if result.sent_at is None:
            result.sent_at = clock()
        result.trying(target)
        upstream, first, error = await _open(request, session, target, path, body, options, last)
        if upstream is None:
            result.passed(error)
            continue
        result.took(upstream.status)
        try:
            extra = response_headers(result) if response_headers is not None else {}
            response = await _relay(request, upstream, first, result, clock, options, extra,
                                    answered)
        finally:
            # A fully read body frees the connection for reuse; anything else closes it, which
            # tells the backend to stop generating.
            if upstream.content.at_eof() and not result.error and not result.client_disconnected:
                upstream.release()
            else:
                upstream.close()
        return response
    result.status = 502
    response = _all_failed(result)
    if response_headers is not None:
        response.headers.update(response_headers(result))
    return response


async def _open(
    request: web.Request,
    session: aiohttp.ClientSession,
    target: Target,
    path: str,
    body: bytes | None,
    options: ForwardOptions,
    last: bool,
) -> tuple[aiohttp.ClientResponse | None, bytes, str]:
    """Connect and read the first bytes; (None, b"", why) when the target should be skipped."""
    send = functools.partial(
        session.request, request.method, _upstream_url(target.base_url, path),
        params=request.query if request.query_string else None, data=body,
        headers=_upstream_headers(request.headers, target),
        timeout=_connect_timeout(options.connect_timeout_s), allow_redirects=False,
    )
    try:
        try:
            upstream = await send()
        except _DROPPED_UNANSWERED:
            # Most often a pooled keep-alive connection the backend closed as we reused it
            # (llama-server drops idle ones after 5 s): same backend, once more, before failing
            # over and marking it failed.
            upstream = await send()
    except _UPSTREAM_ERRORS as exc:
        return None, b"", _describe(exc)
    if upstream.status in BACKEND_FAILED_STATUSES and not last:
        upstream.close()
        return None, b"", f"status {upstream.status}"
    try:
        first = await _first_bytes(upstream, options.first_byte_timeout_s)
    except _UPSTREAM_ERRORS as exc:
        upstream.close()
        return None, b"", f"failed before the first byte: {_describe(exc)}"
    return upstream, first, ""


async def _first_bytes(upstream: aiohttp.ClientResponse, timeout_s: float) -> bytes:
    if _is_sse(upstream):
        read = upstream.content.readany()
    else:
        read = upstream.read()  # whole body: a non-stream response is relayed in one piece
    return await (asyncio.wait_for(read, timeout_s) if timeout_s > 0 else read)


async def _relay(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    first: bytes,
    result: ForwardResult,
    clock: Clock,
    options: ForwardOptions,
    extra: Mapping[str, str],
    answered: AnsweredHook | None,
) -> web.StreamResponse:
    headers = _downstream_headers(upstream.headers, extra)
    if not _is_sse(upstream):
        arrived = clock()
        if answered is not None:  # read whole by `_open`
            await answered()
        # Read before sending only when the client's bytes depend on it (a meta_info to drop);
        # otherwise the answer leaves first and is measured after.
        parsed_first = options.strip_meta_info
        kind = upstream.content_type
        body = (observed_body(first, kind, result.meter, options.added, arrived) if parsed_first
                else first)
        whole = web.Response(body=body, status=upstream.status, headers=headers)
        try:  # sent here, so that the caller's bookkeeping runs after the client has it
            await whole.prepare(request)
            await whole.write_eof()
        except _CLIENT_GONE:
            result.client_disconnected = True
        finally:
            if not parsed_first:
                observed_body(first, kind, result.meter, options.added, arrived)
        return whole
    response = web.StreamResponse(status=upstream.status, headers=headers)
    try:
        await response.prepare(request)
        await _relay_events(response, upstream, first, result, clock, options, answered)
    except _CLIENT_GONE:
        result.client_disconnected = True
    return response


async def _relay_events(
    response: web.StreamResponse,
    upstream: aiohttp.ClientResponse,
    first: bytes,
    result: ForwardResult,
    clock: Clock,
    options: ForwardOptions,
    answered: AnsweredHook | None,
) -> None:
    splitter = SSESplitter()
    chunk = first
    while chunk:
        kept = client_events(splitter, chunk, result.meter, options.added, clock())
        if kept:  # one write per upstream read: the events arrived together
            await response.write(kept)
        try:
            chunk = await upstream.content.readany()
        except _UPSTREAM_ERRORS as exc:
            result.broke(_describe(exc))
            await response.write(error_event(502, result.error, code="backend_failed"))
            return
    if answered is not None:
        await answered()
    rest = splitter.flush()
    if rest:
        await response.write(rest)
    await response.write_eof()


# Per request these would be rebuilt from the same few values: a parsed URL per (backend, path),
# a timeout per configured connect timeout. Both caches are bounded (paths come from clients).
@functools.lru_cache(maxsize=256)
def _upstream_url(base_url: str, path: str) -> URL:
    return URL(base_url.rstrip("/") + path)


@functools.lru_cache(maxsize=16)
def _connect_timeout(seconds: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, connect=seconds, sock_connect=seconds)


def withheld(name: str) -> bool:
    """Whether a client's request header (lower case) stays out of the engine's request: it
    describes this hop, is said to specroute, or is an encoding the proxy undoes or sets."""
    return name in HOP_BY_HOP or name.startswith(OURS_PREFIX) or name in RECODED


def engine_headers(api_key: str) -> dict[str, str]:
    """What every request to an engine carries in place of the client's: the engine's bytes
    as they are (no compression), and the instance's own key."""
    headers = {"Accept-Encoding": "identity"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _upstream_headers(incoming: Mapping[str, str], target: Target) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict()
    for key, value in incoming.items():
        if not withheld(key.lower()):
            headers.add(key, value)
    headers.update(engine_headers(target.api_key))
    return headers


def _downstream_headers(upstream: Mapping[str, str], extra: Mapping[str, str]) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict()
    for key, value in upstream.items():
        if key.lower() not in HOP_BY_HOP:
            headers.add(key, value)
    headers.update(extra)
    return headers


def _is_sse(upstream: aiohttp.ClientResponse) -> bool:
    return is_event_stream(upstream.content_type)


def _all_failed(result: ForwardResult) -> web.Response:
    tried = ", ".join(result.failover_from) or "none"
    message = f"No backend could serve the request (tried: {tried}). Last error: {result.error}"
    return web.json_response(error_body(502, message, code="all_backends_failed"), status=502)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text
