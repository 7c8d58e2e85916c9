"""The real Envoy 1.40 running deploy/envoy/*.yaml, in front of aiohttp upstreams on loopback,
with a test-only ext_proc endpoint picker (grpc.aio, Envoy's generated protos from xds-protos).

The picker speaks the GIE protocol as specroute's does: on the pick filter's stream it holds the
request headers' answer until the whole body arrived (STREAMED, sent without waiting for that
answer), then names the upstream (header and/or `envoy.lb` metadata) and lets each chunk go on
("continue", no echo); the watch filter's stream (observability mode) it only reads. Skipped when Envoy is not cached, unless
SPECROUTE_REQUIRE_LOCAL is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue, HeaderValueOption
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    BodyResponse,
    CommonResponse,
    HeaderMutation,
    HeadersResponse,
    ImmediateResponse,
    ProcessingRequest,
    ProcessingResponse,
    TrailersResponse,
)
from envoy.type.v3.http_status_pb2 import HttpStatus, StatusCode
from google.protobuf.struct_pb2 import Struct

from backends.local.cache import LocalBackendError, free_loopback_port
from backends.local.envoy import (
    EnvoyProcess,
    cached_envoy,
    ensure_envoy,
    render_config,
    start_envoy,
    validate_config,
)
from tests.missing import ENVOY, skip_missing

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "deploy" / "envoy" / "envoy.yaml"
FALLBACK_CONFIG = ROOT / "deploy" / "envoy" / "envoy-fallback.yaml"
DESTINATION = "x-gateway-destination-endpoint"
SERVED = "x-gateway-destination-endpoint-served"
WAIT_S = 10.0  # every wait on the other side is bounded by this
MAX_BODY = 32 * 2**20  # what the upstreams accept (specroute's limits.max_body_mb)
ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


def require_envoy() -> Path:
    binary = cached_envoy()
    if binary is not None:
        return binary
    skip_missing(ENVOY)


# ---- the test-only picker ------------------------------------------------------------------

async def until(check: Callable[[], object]) -> None:
    """Wait, bounded by WAIT_S, until `check()` holds: the watcher's messages come after the
    client's answer, nobody waiting on them."""
    for _ in range(int(WAIT_S / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("not seen in time")


def header_map(headers: HeaderMap) -> dict[str, str]:
    """Envoy 1.40 sends header values in `raw_value` (bytes); `value` stays empty."""
    return {h.key: (h.raw_value.decode() if h.raw_value else h.value) for h in headers.headers}


def set_header(name: str, value: str) -> HeaderValueOption:
    return HeaderValueOption(header=HeaderValue(key=name, raw_value=value.encode()),
                             append_action=HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD)


def picked_metadata(destination: str) -> Struct:
    metadata = Struct()
    metadata.update({"envoy.lb": {DESTINATION: destination}})
    return metadata


@dataclass
class Picker:
    """Names `destination` for every request, by header and/or `envoy.lb` metadata."""

    destination: str
    by_header: bool = True
    by_metadata: bool = False
    reject: bytes | None = None  # an ImmediateResponse 503 with this body once the body is in
    delay_s: float = 0.0  # how long it "thinks" once it has the body
    # how long it takes to answer the answer's headers ("headers") or body ("body")
    response_delay: tuple[str, float] = ("", 0.0)
    # False: answer the headers at once and pick on the body answer, which is too late
    hold_headers: bool = True
    fail: bool = False  # end the stream with a gRPC error once the body is in
    bodies: list[bytes] = field(default_factory=list)
    request_headers: list[dict[str, str]] = field(default_factory=list)
    response_attributes: list[dict[str, Any]] = field(default_factory=list)
    response_metadata: list[dict[str, Any]] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    chunks: list[int] = field(default_factory=list)  # the sizes of the request's body chunks
    held: int = 0  # body messages not yet answered (each gets one, after the headers')
    watched: list[str] = field(default_factory=list)  # the watcher's messages of the answer
    # the watcher reads each message of the answer once this is set (set: at once)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.released.set()

    async def Process(  # the gRPC method's name
        self, requests: AsyncIterator[ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[ProcessingResponse]:
        """One stream per HTTP request: each message gets its answers, in order."""
        body = bytearray()  # the request body so far
        async for request in requests:
            kind = request.WhichOneof("request")
            self.kinds.append(kind)
            if request.observability_mode:  # the watcher's: read, never answered
                if kind == "response_headers":
                    self.on_response_headers(request)
                if kind.startswith("response_"):
                    self.watched.append(kind)
                    await self.released.wait()
                continue
            if kind.startswith("request_"):
                answers = await self.on_request(kind, request, body, context)
            else:
                answers = self.on_response(kind, request)
                part, delay = self.response_delay
                if kind == f"response_{part}":
                    await asyncio.sleep(delay)
            for answer in answers:
                yield answer

    async def on_request(
        self, kind: str, request: ProcessingRequest, body: bytearray,
        context: grpc.aio.ServicerContext,
    ) -> list[ProcessingResponse]:
        if kind == "request_headers":
            self.request_headers.append(header_map(request.request_headers.headers))
            if request.request_headers.end_of_stream:  # no body: pick on the headers
                return [self.picked_headers()]
            return [] if self.hold_headers else [ProcessingResponse(
                request_headers=HeadersResponse())]
        if kind == "request_trailers":  # the body ended with trailers
            return await self.on_request_end(bytes(body), trailers=True)
        chunk = request.request_body
        if chunk.body:
            self.chunks.append(len(chunk.body))
        body += chunk.body
        self.held += 1
        if not self.hold_headers and not chunk.end_of_stream:  # headers answered: go on
            self.held -= 1
            return [ProcessingResponse(request_body=BodyResponse())]
        if not chunk.end_of_stream:
            return []
        if self.fail:
            await context.abort(grpc.StatusCode.INTERNAL, "the picker failed")
        return await self.on_request_end(bytes(body))

    def on_response(self, kind: str, request: ProcessingRequest) -> list[ProcessingResponse]:
        if kind == "response_headers":
            self.on_response_headers(request)
            return [ProcessingResponse(response_headers=HeadersResponse())]
        if kind == "response_body":  # STREAMED: an empty answer lets Envoy's copy go on
            return [ProcessingResponse(response_body=BodyResponse())]
        return [ProcessingResponse(response_trailers=TrailersResponse())]

    async def on_request_end(
        self, body: bytes, *, trailers: bool = False
    ) -> list[ProcessingResponse]:
        """The headers answer (held until now), then "go on" for each chunk held: the body
        goes on as Envoy holds it, no byte echoed."""
        self.bodies.append(body)
        await asyncio.sleep(self.delay_s)
        if self.reject is not None:
            return [rejection(self.reject)]
        go_on = [ProcessingResponse(request_body=BodyResponse()) for _ in range(self.held)]
        self.held = 0
        if self.hold_headers:
            answers = [self.picked_headers(), *go_on]
        else:  # the pick rides on the last chunk's answer
            if go_on:
                go_on[-1].request_body.response.header_mutation.CopyFrom(self.mutation())
            answers = go_on
        if trailers:
            answers.append(ProcessingResponse(request_trailers=TrailersResponse()))
        return answers

    def mutation(self) -> HeaderMutation:
        mutation = HeaderMutation()
        if self.by_header:
            mutation.set_headers.append(set_header(DESTINATION, self.destination))
        return mutation

    def picked_headers(self) -> ProcessingResponse:
        response = ProcessingResponse(request_headers=HeadersResponse(
            response=CommonResponse(header_mutation=self.mutation())))
        if self.by_metadata:
            response.dynamic_metadata.CopyFrom(picked_metadata(self.destination))
        return response

    def on_response_headers(self, request: ProcessingRequest) -> None:
        attributes = request.attributes.get("envoy.filters.http.ext_proc")
        self.response_attributes.append(dict(attributes.items()) if attributes else {})
        lb = request.metadata_context.filter_metadata.get("envoy.lb")
        self.response_metadata.append(dict(lb.items()) if lb else {})


def rejection(body: bytes) -> ProcessingResponse:
    return ProcessingResponse(immediate_response=ImmediateResponse(
        status=HttpStatus(code=StatusCode.ServiceUnavailable), body=body,
        headers=HeaderMutation(set_headers=[set_header("content-type", "application/json")]),
        details="no_instance_available"))


@contextlib.asynccontextmanager
async def serving(picker: Picker) -> AsyncIterator[int]:
    """The picker's gRPC server on a free loopback port (the port)."""
    server = grpc.aio.server()
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(picker, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(grace=None)


# ---- the upstreams ---------------------------------------------------------------------------

EVENTS = [b'data: {"choices":[{"delta":{"content":"Par"}}]}\n\n',
          b'data: {"choices":[{"delta":{"content":"is \xc3\xa9t\xc3\xa9."}}]}\n\n',
          b"data: [DONE]\n\n"]


@dataclass
class Seen:
    headers: dict[str, str]
    body: bytes


@dataclass
class Upstream:
    server: TestServer
    seen: list[Seen]
    first_event_read: asyncio.Event  # the client sets it: the upstream then sends the rest

    @property
    def port(self) -> int:
        assert self.server.port is not None  # set once the server started
        return self.server.port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def answer(self) -> bytes:
        return json.dumps({"served_by": self.address, "content": "Paris été."},
                          ensure_ascii=False).encode()


def upstream_app(upstream: list[Upstream]) -> web.Application:
    """Answers a chat completion with bytes naming itself; `"stream": true` gets SSE."""

    async def chat(request: web.Request) -> web.StreamResponse:
        me = upstream[0]
        body = await request.read()
        me.seen.append(Seen(dict(request.headers), body))
        if not json.loads(body).get("stream"):
            return web.Response(body=me.answer(), content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(EVENTS[0])
        # the rest only once the client read the first event: a proxy that held the stream
        # back would make this wait time out
        await asyncio.wait_for(me.first_event_read.wait(), WAIT_S)
        for event in EVENTS[1:]:
            await response.write(event)
        await response.write_eof()
        return response

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/v1/chat/completions", chat)
    return app


@pytest.fixture
async def upstreams(aiohttp_server: ServerFactory) -> list[Upstream]:
    made: list[Upstream] = []
    for _ in range(2):
        slot: list[Upstream] = []
        server = await aiohttp_server(upstream_app(slot))
        slot.append(Upstream(server, [], asyncio.Event()))
        made.append(slot[0])
    return made


# ---- Envoy ------------------------------------------------------------------------------------

@contextlib.asynccontextmanager
async def envoy_running(config_text: str, workdir: Path) -> AsyncIterator[EnvoyProcess]:
    envoy = await asyncio.to_thread(start_envoy, config_text, workdir, binary=require_envoy())
    try:
        yield envoy
    finally:
        await asyncio.to_thread(envoy.stop)


@dataclass
class Front:
    envoy: EnvoyProcess
    url: str  # where clients post chat completions

    async def stat(self, name: str) -> int:
        """One counter of Envoy's admin /stats (0 when Envoy has not created it)."""
        timeout = aiohttp.ClientTimeout(total=WAIT_S)
        params = {"filter": f"^{name}$", "format": "json"}
        async with (aiohttp.ClientSession(timeout=timeout) as session,
                    session.get(f"{self.envoy.admin_url}/stats", params=params) as answer):
            stats = (await answer.json())["stats"]
        return sum(int(stat["value"]) for stat in stats if stat.get("name") == name)


@contextlib.asynccontextmanager
async def through_envoy(
    tmp_path: Path, picker: Picker | None, config: Path = CONFIG,
    edit: Callable[[str], str] = lambda text: text, **ports: int,
) -> AsyncIterator[Front]:
    """Envoy with `config` rendered in front of `picker` (None: nothing listens on the picker
    port)."""
    listen = free_loopback_port()
    async with contextlib.AsyncExitStack() as stack:
        picker_port = (await stack.enter_async_context(serving(picker)) if picker is not None
                       else free_loopback_port())
        text = edit(render_config(config, LISTEN_PORT=listen, PICKER_PORT=picker_port,
                                  ADMIN_PORT=free_loopback_port(), **ports))
        envoy = await stack.enter_async_context(envoy_running(text, tmp_path / "envoy"))
        yield Front(envoy, f"http://127.0.0.1:{listen}/v1/chat/completions")


def chat_body(stream: bool = False, copies: int = 6000) -> bytes:
    """A long prompt (228 KB by default) in a chat completion request."""
    prompt = "Quelle est la capitale de la France ? " * copies
    return json.dumps({"model": "smollm2", "stream": stream,
                       "messages": [{"role": "user", "content": prompt}]}).encode()


async def in_pieces(body: bytes, pieces: int = 4) -> AsyncIterator[bytes]:
    """A client that uploads slowly (chunked): Envoy passes each piece on as it comes."""
    size = len(body) // pieces + 1
    for start in range(0, len(body), size):
        yield body[start:start + size]
        await asyncio.sleep(0.05)


async def post(
    url: str, body: bytes, *, pieces: bool = False
) -> tuple[int, dict[str, str], bytes]:
    timeout = aiohttp.ClientTimeout(total=WAIT_S * 2)
    data = in_pieces(body) if pieces else body
    headers = {"Content-Type": "application/json"}
    async with (aiohttp.ClientSession(timeout=timeout) as session,
                session.post(url, data=data, headers=headers) as response):
        return response.status, dict(response.headers), await response.read()


# ---- the tests --------------------------------------------------------------------------------

@pytest.mark.parametrize("upload", ["whole", "in pieces"])
@pytest.mark.parametrize("how", ["header", "metadata"])
async def test_the_picked_upstream_serves_and_the_answer_comes_back_unchanged(
    upstreams: list[Upstream], tmp_path: Path, how: str, upload: str
) -> None:
    other, picked = upstreams
    picker = Picker(picked.address, by_header=how == "header", by_metadata=how == "metadata")
    body = chat_body()
    async with through_envoy(tmp_path, picker) as front:
        status, _, answer = await post(front.url, body, pieces=upload == "in pieces")
        await until(lambda: picker.response_attributes)
    assert (status, answer) == (200, picked.answer())
    assert other.seen == []
    assert [seen.body for seen in picked.seen] == [body]
    # nothing echoed: the body went on as the client framed it
    assert picked.seen[0].headers.get("Content-Length", str(len(body))) == str(len(body))
    assert picker.bodies == [body]
    assert sum(picker.chunks) == len(body)
    if upload == "in pieces":
        assert len(picker.chunks) > 1  # the picker gathered them before it answered
    assert picker.request_headers[0][":path"] == "/v1/chat/completions"
    assert picker.response_attributes == [{"upstream.address": picked.address,
                                           "response.code_details": "via_upstream"}]


async def test_a_pick_sent_after_the_headers_answer_is_too_late(
    upstreams: list[Upstream], tmp_path: Path
) -> None:
    """Envoy routes the request once the headers are answered: a picker that needs the body
    must hold that answer until the body is in."""
    picker = Picker(upstreams[0].address, hold_headers=False)
    async with through_envoy(tmp_path, picker) as front:
        status, _, answer = await post(front.url, chat_body())
    assert (status, answer) == (503, b"no healthy upstream")
    assert [upstream.seen for upstream in upstreams] == [[], []]


async def test_an_sse_stream_passes_event_by_event_and_byte_identical(
    upstreams: list[Upstream], tmp_path: Path
) -> None:
    picked = upstreams[1]
    async with through_envoy(tmp_path, Picker(picked.address)) as front:
        timeout = aiohttp.ClientTimeout(total=WAIT_S * 2)
        async with (aiohttp.ClientSession(timeout=timeout) as session,
                    session.post(front.url, data=chat_body(stream=True)) as response):
            assert response.status == 200
            assert response.headers["Content-Type"] == "text/event-stream"
            first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), WAIT_S)
            picked.first_event_read.set()  # the upstream sends the rest only now
            rest = await response.read()
    assert first + rest == b"".join(EVENTS)
    assert len(picked.seen) == 1


@pytest.mark.parametrize("config", [CONFIG, FALLBACK_CONFIG])
@pytest.mark.parametrize("down", ["not listening", "stream error"])
async def test_a_picker_that_is_down_fails_the_request_with_an_empty_500(
    upstreams: list[Upstream], tmp_path: Path, down: str, config: Path
) -> None:
    """failure_mode_allow: false: the request fails rather than reaching an upstream nobody
    picked (or, failing open, reaching one cut short: Envoy 1.40 sent on part of the body)."""
    picker = None if down == "not listening" else Picker(upstreams[0].address, fail=True)
    ports = {} if config == CONFIG else {"MTP_PORT": upstreams[0].port,
                                         "PLAIN_PORT": upstreams[1].port}
    async with through_envoy(tmp_path, picker, config, **ports) as front:
        status, headers, answer = await post(front.url, chat_body())
        failed = await front.stat("http.inference.ext_proc.streams_failed")
        allowed = await front.stat("http.inference.ext_proc.failure_mode_allowed")
    assert (status, answer, headers["Content-Length"]) == (500, b"", "0")
    assert (failed, allowed) == (1, 0)
    assert [upstream.seen for upstream in upstreams] == [[], []]


async def test_a_picker_that_never_answers_is_cut_by_the_route_idle_timeout(
    upstreams: list[Upstream], tmp_path: Path
) -> None:
    """The deployed config with idle_timeout cut to 1 s (it is the only bound: see below)."""

    def short_idle(text: str) -> str:
        assert "idle_timeout: 300s" in text
        return text.replace("idle_timeout: 300s", "idle_timeout: 1s")

    picker = Picker(upstreams[0].address, delay_s=WAIT_S)
    async with through_envoy(tmp_path, picker, edit=short_idle) as front:
        status, _, answer = await asyncio.wait_for(post(front.url, chat_body()), WAIT_S / 2)
    assert (status, answer) == (504, b"stream timeout")
    assert upstreams[0].seen == []


async def test_the_picker_can_refuse_with_an_immediate_503_once_it_read_the_body(
    upstreams: list[Upstream], tmp_path: Path
) -> None:
    refusal = b'{"error":{"message":"no instance can take this request","type":"overloaded"}}'
    picker = Picker(upstreams[0].address, reject=refusal)
    body = chat_body()
    async with through_envoy(tmp_path, picker) as front:
        status, headers, answer = await post(front.url, body)
    assert (status, answer) == (503, refusal)
    assert headers["Content-Type"] == "application/json"
    assert picker.bodies == [body]
    assert [upstream.seen for upstream in upstreams] == [[], []]


@pytest.mark.parametrize("how", ["header", "metadata"])
async def test_original_dst_takes_one_endpoint_a_list_is_a_503_not_a_fallback(
    upstreams: list[Upstream], tmp_path: Path, how: str
) -> None:
    live = upstreams[1]
    dead = f"127.0.0.1:{free_loopback_port()}"
    picker = Picker(f"{live.address},{dead}", by_header=how == "header",
                    by_metadata=how == "metadata")
    async with through_envoy(tmp_path, picker) as front:
        status, _, answer = await post(front.url, chat_body())
        invalid = await front.stat("cluster.inference_pool.original_dst_host_invalid")
    assert (status, answer) == (503, b"no healthy upstream")
    assert invalid == 1  # the list does not parse as an address: not even the first is used
    assert live.seen == []


@pytest.mark.parametrize("how", ["header", "metadata"])
async def test_the_fallback_config_fails_over_to_the_next_endpoint_of_the_list(
    upstreams: list[Upstream], tmp_path: Path, how: str
) -> None:
    live = upstreams[1]
    dead_port = free_loopback_port()  # listed in the cluster, nothing listens there
    picks = f"127.0.0.1:{dead_port},{live.address}"
    picker = Picker(picks, by_header=how == "header", by_metadata=how == "metadata")
    body = chat_body(copies=60_000)  # 2.3 MB: over Envoy's default 1 MiB retry buffer
    async with through_envoy(tmp_path, picker, FALLBACK_CONFIG, MTP_PORT=dead_port,
                             PLAIN_PORT=live.port) as front:
        status, _, answer = await post(front.url, body)
        await until(lambda: picker.response_attributes)
        retries = await front.stat("cluster.inference_pool.upstream_rq_retry")
        failed = await front.stat("cluster.inference_pool.upstream_cx_connect_fail")
    assert (status, answer) == (200, live.answer())
    assert (retries, failed) == (1, 1)  # the primary was tried first
    assert [seen.body for seen in live.seen] == [body]
    assert picker.response_attributes == [{"upstream.address": live.address,
                                           "response.code_details": "via_upstream"}]
    # the policy wrote the endpoint that served into envoy.lb, forwarded to the picker
    served = {SERVED: live.address}
    assert picker.response_metadata == [served | ({DESTINATION: picks} if how == "metadata"
                                                  else {})]


@pytest.mark.parametrize("config", [CONFIG, FALLBACK_CONFIG])
async def test_without_the_buffer_limit_a_long_prompt_is_never_picked(
    upstreams: list[Upstream], tmp_path: Path, config: Path
) -> None:
    """Why the configs set request_body_buffer_limit: Envoy holds the body until the pick is
    in (and resends it from there on a retry). Past its default 1 MiB it stops reading, the
    picker waits for the body's end, and message_timeout (cut to 0.5 s) ends the request."""
    live = upstreams[1]
    dead_port = free_loopback_port()

    def default_limit(text: str) -> str:
        text = text.replace("message_timeout: 5s", "message_timeout: 0.5s")
        line = "                request_body_buffer_limit: 34603008\n"
        assert text.count(line) == 2  # the edited answer's route and the other
        return text.replace(line, "")

    picker = Picker(live.address if config == CONFIG else f"127.0.0.1:{dead_port},{live.address}")
    async with through_envoy(tmp_path, picker, config, edit=default_limit,
                             **({} if config == CONFIG else {"MTP_PORT": dead_port,
                                                             "PLAIN_PORT": live.port})) as front:
        status, _, _ = await post(front.url, chat_body(copies=60_000))
        timeouts = await front.stat("http.inference.ext_proc.message_timeouts")
    assert (status, timeouts) == (504, 1)
    assert picker.bodies == [] and live.seen == []


async def test_a_picker_slower_than_message_timeout_fails_the_request_with_a_504(
    upstreams: list[Upstream], tmp_path: Path
) -> None:
    """The deployed config with message_timeout cut to 0.2 s: Envoy waits that long for the
    pick (the headers' answer, sent once the body is in), then answers 504 itself."""
    picked = upstreams[0]

    def short_timeout(text: str) -> str:
        assert "message_timeout: 5s" in text
        return text.replace("message_timeout: 5s", "message_timeout: 0.2s")

    picker = Picker(picked.address, delay_s=1.0)
    async with through_envoy(tmp_path, picker, edit=short_timeout) as front:
        status, _, _ = await post(front.url, chat_body())
        timeouts = await front.stat("http.inference.ext_proc.message_timeouts")
    assert (status, timeouts) == (504, 1)
    assert picked.seen == []


@pytest.mark.parametrize("stream", [False, True])
async def test_the_answer_reaches_the_client_whole_while_the_watcher_has_read_nothing(
    upstreams: list[Upstream], tmp_path: Path, stream: bool
) -> None:
    """The watch filter is in observability mode: Envoy sends it the answer's headers and
    chunks and waits for nothing. Here the picker reads none of them until the client has the
    whole answer: it still gets it, byte for byte, and the watcher then reads it all."""
    picked = upstreams[0]
    picker = Picker(picked.address)
    picker.released.clear()
    timeout = aiohttp.ClientTimeout(total=WAIT_S)
    async with (through_envoy(tmp_path, picker) as front,
                aiohttp.ClientSession(timeout=timeout) as session):
        async with session.post(front.url, data=chat_body(stream=stream)) as response:
            assert response.status == 200
            if stream:
                first = await response.content.readuntil(b"\n\n")
                picked.first_event_read.set()  # the upstream sends the rest only now
                answer = first + await response.read()
            else:
                answer = await response.read()
        await until(lambda: picker.watched)
        assert picker.watched == ["response_headers"]  # it sits on the first one
        picker.released.set()
        await until(lambda: "response_body" in picker.watched)  # then reads the rest
    assert answer == (b"".join(EVENTS) if stream else picked.answer())
    assert picker.watched[0] == "response_headers" and "response_body" in picker.watched


def test_both_configs_validate_and_two_envoys_run_side_by_side(tmp_path: Path) -> None:
    binary = require_envoy()
    rendered = []
    for index, (config, extra) in enumerate([
            (CONFIG, {}), (FALLBACK_CONFIG, {"MTP_PORT": 1, "PLAIN_PORT": 2})]):
        ports = {"LISTEN_PORT": free_loopback_port(), "PICKER_PORT": free_loopback_port(),
                 "ADMIN_PORT": free_loopback_port()}
        text = render_config(config, **ports, **extra)
        validate_config(text, tmp_path / f"validate-{index}", binary)
        rendered.append(text)
    first = start_envoy(rendered[0], tmp_path / "first", binary=binary)
    try:
        second = start_envoy(rendered[1], tmp_path / "second", binary=binary)
        second.stop()
        assert second.process.returncode == 0
        assert first.process.poll() is None
    finally:
        first.stop()


def test_a_config_envoy_refuses_is_an_error_naming_the_field(tmp_path: Path) -> None:
    binary = require_envoy()
    text = render_config(CONFIG, LISTEN_PORT=1, PICKER_PORT=2, ADMIN_PORT=3)
    broken = text.replace("response_body_mode: STREAMED", "response_body_mode: STREAMING")
    with pytest.raises(LocalBackendError, match="STREAMING"):
        validate_config(broken, tmp_path, binary)


def test_render_names_missing_and_unknown_placeholders(tmp_path: Path) -> None:
    with pytest.raises(LocalBackendError, match=r"ADMIN_PORT.*LISTN_PORT"):
        render_config(CONFIG, LISTN_PORT=1, PICKER_PORT=2)
    template = tmp_path / "t.yaml"
    template.write_text("port_value: ${PORT}  # ${PORT}\n")
    assert render_config(template, PORT=8080) == "port_value: 8080  # 8080\n"


def test_the_cached_envoy_is_found_without_installing(tmp_path: Path) -> None:
    binary = require_envoy()
    lines: list[str] = []
    assert ensure_envoy(lines.append) == binary
    assert lines == []
    assert cached_envoy(tmp_path) is None  # an empty cache has none
