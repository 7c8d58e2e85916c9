"""`specroute epp` behind the real Envoy 1.40, side by side with proxy mode where the two must
agree: the engines' counters read around a request, the proxy's own answers (a method a path
does not take, an encoded or too large body, `GET /v1/models`), the headers an engine gets; and
what the picker records of instances passed and of an answer that broke off."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from aiohttp import web
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from backends.local.simulator import Fault, SimState, create_sim_app
from backends.spec import BackendSpec
from policies import observation_from_record
from router.app import create_app
from router.config import Limits
from router.epp import messages
from router.epp.exchange import Exchanges, endpoint_of
from router.epp.pick import Pick
from router.epp.server import Picker
from router.epp.watch import Watch
from router.instances.pool import POOL
from router.state import DEPS, SESSIONS, Deps
from tests.router.conftest import ListSink, ServerFactory, logged
from tests.router.epp.test_picker import (
    ASKS,
    TIMEOUT,
    Engines,
    chat,
    config_for,
    engine_app,
    picker_front,
    post,
    proxy_front,
)

TECHNICAL = chat({"messages": [{"role": "user", "content": "Explain how a B-tree keeps itself "
                                "balanced, in technical detail."}], "temperature": 0})


async def sim_engines(aiohttp_server: ServerFactory, engine: str = "llamacpp",
                      **mtp: Any) -> Engines:
    states = {"mtp-0": SimState(profile="mtp", acceptance={"technical": 0.8}, **mtp),
              "plain-0": SimState(profile="plain", model="plain-model")}
    servers = {name: await aiohttp_server(create_sim_app(s)) for name, s in states.items()}
    specs = [BackendSpec(name=name, engine=engine, profile=s.profile,
                         url=f"http://127.0.0.1:{servers[name].port}")
             for name, s in states.items()]
    return Engines(states, servers, specs)


async def sim_app(aiohttp_server: ServerFactory, tmp: Path) -> tuple[web.Application, ListSink]:
    """The picker's app over two simulated engines, serving, and the sink of its records."""
    sink = ListSink()
    app = create_app(config_for(await sim_engines(aiohttp_server), tmp, "epp"),
                     deps=Deps(sinks=(sink,), explore=False, record_interval_s=0.0))
    await aiohttp_server(app)
    return app, sink


async def test_an_engine_with_counters_only_gets_its_acceptance_read_as_in_proxy_mode(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    # vLLM without its per-request flag: the draft stats are only in /metrics' counters
    e = await sim_engines(aiohttp_server, engine="vllm", stats="prometheus")
    mtp = e.states["mtp-0"]
    proxy = await proxy_front(aiohttp_server, tmp_path, e)
    async with picker_front(aiohttp_server, tmp_path, e) as picker:
        for front in (proxy, picker):
            before = mtp.drafted_total, mtp.accepted_total
            status, headers, _ = await post(front.url + "/chat/completions", TECHNICAL)
            assert status == 200 and headers["x-specroute-backend"] == "mtp-0"
            await logged(front.sink)
            outcome = front.sink.records[0].outcome
            assert outcome.spec_source == "prometheus"
            assert (outcome.draft_n, outcome.draft_accepted) == (
                mtp.drafted_total - before[0], mtp.accepted_total - before[1])
            assert outcome.draft_n and outcome.draft_n > 0


def gzipped(body: dict[str, Any]) -> bytes:
    return gzip.compress(json.dumps(body).encode())


# (method, path, body, request headers): what the proxy answers itself, or reads decoded
ASKED: list[tuple[str, str, bytes, dict[str, str]]] = [
    ("GET", "/chat/completions", b"", {}),
    ("PUT", "/messages", b"{}", {}),
    ("POST", "/models", b"{}", {}),
    ("POST", "/chat/completions", gzipped(chat(ASKS[1])), {"Content-Encoding": "gzip"}),
    ("POST", "/chat/completions", b"not gzip at all", {"Content-Encoding": "gzip"}),
    # its trailer cut off: aiohttp reads what is there
    ("POST", "/chat/completions", gzipped(chat(ASKS[1]))[:-8], {"Content-Encoding": "gzip"}),
    ("POST", "/chat/completions", gzip.compress(b" " * 5000), {"Content-Encoding": "gzip"}),
    ("POST", "/chat/completions", b" " * 5000, {}),
    ("GET", "/models", b"", {}),
]


async def send(url: str, method: str, body: bytes,
               headers: dict[str, str]) -> tuple[int, dict[str, str], Any]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session, session.request(
            method, url, data=body or None,
            headers={"Content-Type": "application/json", **headers}) as response:
        return (response.status, {k.lower(): v for k, v in response.headers.items()},
                json.loads(await response.read()))


async def test_the_proxy_s_own_answers_are_the_picker_s(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    e = await sim_engines(aiohttp_server)
    small = {"limits": Limits(max_body_mb=4000 / 2**20)}  # 4,000 bytes
    proxy = await proxy_front(aiohttp_server, tmp_path, e, **small)
    async with picker_front(aiohttp_server, tmp_path, e, **small) as picker:
        for method, path, body, headers in ASKED:
            by_proxy = await send(proxy.url + path, method, body, headers)
            by_picker = await send(picker.url + path, method, body, headers)
            case = (method, path, body[:20], headers)
            assert by_picker[0] == by_proxy[0], case
            assert by_picker[1].get("allow") == by_proxy[1].get("allow"), case
            if by_proxy[0] == 200 and path == "/chat/completions":
                assert by_picker[1]["x-specroute-backend"] == by_proxy[1]["x-specroute-backend"]
                assert by_picker[2]["choices"] == by_proxy[2]["choices"], case
            else:
                assert by_picker[2] == by_proxy[2], case
    models = {m["id"] for m in by_proxy[2]["data"]}
    assert models == {"sim-model", "plain-model"}  # every instance's list, not the default's
    # the gzip asks read as the proxy read them: the whole one and the one cut short, each twice
    assert [r["body"]["messages"] for r in e.states["plain-0"].received] == (
        [chat(ASKS[1])["messages"]] * 4)


def gzipping_engine(seen: list[dict[str, str]]) -> web.Application:
    """An engine that compresses its answer when the request lets it, and notes its headers."""

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        seen.append({k.lower(): v for k, v in request.headers.items()})
        response = web.json_response({
            "id": "x", "object": "chat.completion", "choices": [
                {"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "word " * 400}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 400, "total_tokens": 409}})
        response.enable_compression()  # when Accept-Encoding allows it
        return response

    return engine_app(answer)


async def test_the_engine_gets_the_headers_the_proxy_sends(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    seen: list[dict[str, str]] = []
    servers = {name: await aiohttp_server(gzipping_engine(seen)) for name in ("mtp-0", "plain-0")}
    specs = [BackendSpec(name=name, engine="llamacpp", profile=name.split("-")[0],
                         url=f"http://127.0.0.1:{server.port}") for name, server in servers.items()]
    e = Engines({}, servers, specs)
    client = {"Accept-Encoding": "gzip", "X-Specroute-Note": "for specroute only",
              "X-Specroute-Conversation": "c-1", "X-Trace": "kept"}
    proxy = await proxy_front(aiohttp_server, tmp_path, e)
    async with picker_front(aiohttp_server, tmp_path, e) as picker:
        for front in (proxy, picker):
            status, _, body = await post(front.url + "/chat/completions", chat(ASKS[1]), client)
            assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 400
            await logged(front.sink)
            assert front.sink.records[0].outcome.completion_tokens == 400  # read, not gzip
    by_proxy, by_picker = seen
    for headers in (by_proxy, by_picker):
        assert headers["accept-encoding"] == "identity"
        assert headers["x-trace"] == "kept"
        assert not [k for k in headers if k.startswith("x-specroute-")]


# --- what the picker records -----------------------------------------------------------------

def headers_message(headers: dict[str, str], end_of_stream: bool,
                    response: bool = False) -> ext_proc.ProcessingRequest:
    values = [HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()]
    http = ext_proc.HttpHeaders(headers=HeaderMap(headers=values), end_of_stream=end_of_stream)
    if response:
        return ext_proc.ProcessingRequest(response_headers=http)
    return ext_proc.ProcessingRequest(request_headers=http)


def destinations(responses: list[ext_proc.ProcessingResponse]) -> list[str]:
    mutation = responses[0].request_headers.response.header_mutation
    [value] = [h.header.raw_value.decode() for h in mutation.set_headers
               if h.header.key == messages.DESTINATION]
    return value.split(",")


def ours_of(responses: list[ext_proc.ProcessingResponse],
            namespace: str = messages.OURS_NAMESPACE) -> dict[str, str]:
    """What the pick put in the metadata `namespace` (`specroute`, which Envoy forwards to the
    answer's watcher, by default)."""
    values = responses[0].dynamic_metadata.fields[namespace].struct_value
    return {key: value.string_value for key, value in values.fields.items()}


def watched(message: ext_proc.ProcessingRequest, ours: dict[str, str],
            ) -> ext_proc.ProcessingRequest:
    """`message` as Envoy's observability-mode filter sends it, with the pick's metadata."""
    message.observability_mode = True
    fields = message.metadata_context.filter_metadata[messages.OURS_NAMESPACE].fields
    for key, value in ours.items():
        fields[key].string_value = value
    return message


async def test_every_instance_envoy_passed_before_the_one_that_answered_is_marked_failed(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    # at the message level: three instances or more named, Envoy says the third answered
    names = ["mtp-0", "plain-0", "plain-1", "plain-2"]
    servers = [await aiohttp_server(create_sim_app(SimState(profile=name.split("-")[0])))
               for name in names]
    specs = [BackendSpec(name=name, engine="llamacpp", profile=name.split("-")[0],
                         url=f"http://127.0.0.1:{server.port}")
             for name, server in zip(names, servers, strict=True)]
    sink = ListSink()
    app = create_app(config_for(Engines({}, {}, specs), tmp_path, "epp"),
                     deps=Deps(sinks=(sink,), explore=False, record_interval_s=0.0))
    await aiohttp_server(app)
    exchanges = Exchanges()
    pick = Pick(app, exchanges)
    assert await pick.on(headers_message({":method": "POST", ":path": "/v1/chat/completions",
                                          "content-type": "application/json"}, False)) == []
    body = ext_proc.HttpBody(body=json.dumps(chat(ASKS[1])).encode(), end_of_stream=True)
    picked = await pick.on(ext_proc.ProcessingRequest(request_body=body))
    assert len(picked) == 2 and picked[1] == messages.REQUEST_BODY_CONTINUE  # no echo
    named = {endpoint_of(s.base_url): s.name for s in specs}
    order = [named[endpoint] for endpoint in destinations(picked)]
    assert len(order) >= 3
    ours = ours_of(picked)
    assert set(ours) == {"exchange", "answer", "strip"}  # all the watcher reads, on each message
    assert ours["answer"] == "watched"
    assert ours_of(picked, messages.HEADERS_NAMESPACE)["x-specroute-backend"] == order[0]
    watch = Watch(app, exchanges)
    watch.on(watched(headers_message({}, False), ours))
    watch.on(watched(answered_by(destinations(picked)[2]), ours))
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}
    end = ext_proc.HttpBody(body=json.dumps(answer).encode(), end_of_stream=True)
    watch.on(watched(ext_proc.ProcessingRequest(response_body=end), ours))
    assert watch.answered
    await watch.finish()
    await logged(sink)
    outcome = sink.records[0].outcome
    assert (outcome.backend, outcome.failover_from) == (order[2], tuple(order[:2]))
    pool, now = app[POOL], app[DEPS].clock()
    assert [pool.runtime(name).failed_until > now for name in order[:3]] == [True, True, False]
    assert len(exchanges) == 0


async def test_a_pick_whose_watcher_never_comes_is_recorded_as_cut_and_frees_its_instance(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    # the client left before Envoy passed the request on: no watcher stream ever opens
    app, sink = await sim_app(aiohttp_server, tmp_path)
    exchanges = Exchanges(unwatched_after_s=0.2)
    pick = Pick(app, exchanges)
    await pick.on(headers_message({":method": "POST", ":path": "/v1/chat/completions",
                                   "content-type": "application/json"}, False))
    body = ext_proc.HttpBody(body=json.dumps(chat(ASKS[1])).encode(), end_of_stream=True)
    await pick.on(ext_proc.ProcessingRequest(request_body=body))
    pool = app[POOL]
    assert sum(pool.known_inflight(name, app[DEPS].clock()) for name in pool.names) == 1
    outcome = (await logged(sink))[0].outcome  # bounded wait
    assert outcome.client_disconnected and len(exchanges) == 0
    assert sum(pool.known_inflight(name, app[DEPS].clock()) for name in pool.names) == 0
    await exchanges.close()


def answered_by(endpoint: str, content_type: str = "application/json",
                ) -> ext_proc.ProcessingRequest:
    """Envoy's message of the answer's headers, from the instance at `endpoint`."""
    message = headers_message({":status": "200", "content-type": content_type}, False,
                              response=True)
    attributes = message.attributes[messages.FILTER]
    attributes.fields[messages.UPSTREAM_ADDRESS].string_value = endpoint
    attributes.fields[messages.CODE_DETAILS].string_value = "via_upstream"
    return message


class Stream:
    """grpc's servicer context as Envoy drives one ext_proc stream: `steps` read in turn, then
    the stream's end, or its reset (grpc.aio cancels the handler's read)."""

    def __init__(self, steps: list[ext_proc.ProcessingRequest], reset: bool = False) -> None:
        self.steps = steps
        self.reset = reset
        self.written: list[ext_proc.ProcessingResponse] = []
        self.read_past = 0  # reads after the last step: the picker waited on Envoy to end it

    async def read(self) -> Any:
        if self.steps:
            return self.steps.pop(0)
        self.read_past += 1
        if self.reset:
            raise asyncio.CancelledError
        return grpc.aio.EOF

    async def write(self, response: ext_proc.ProcessingResponse) -> None:
        self.written.append(response)

    async def messages(self) -> AsyncIterator[ext_proc.ProcessingRequest]:
        """The iterator form grpc.aio also passes (the picker reads the context itself)."""
        while (step := await self.read()) is not grpc.aio.EOF:
            yield step


WORDS = b"".join(b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": w}}]})
                 .encode() + b"\n\n" for w in ("Par", "is"))
ENDED_AT_THE_CLIENT = {
    # Envoy had the answer's end, then the stream was reset
    "the end, then a reset": ("application/json", json.dumps(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
         "usage": {"prompt_tokens": 30, "completion_tokens": 1}}).encode(), True),
    # the openai SDK stops reading at [DONE] and hangs up before the engine's closing chunk
    "[DONE], then the client left": ("text/event-stream", WORDS + b"data: [DONE]\n\n", False),
}


@pytest.mark.parametrize("how", [*ENDED_AT_THE_CLIENT, "cut before [DONE]"])
async def test_a_stream_reset_once_the_answer_ended_is_a_served_turn_not_a_cut_one(
        aiohttp_server: ServerFactory, tmp_path: Path, how: str) -> None:
    app, sink = await sim_app(aiohttp_server, tmp_path)
    picker = Picker(app, fallbacks=False)
    pick = Stream([headers_message({":method": "POST", ":path": "/v1/chat/completions",
                                    "content-type": "application/json",
                                    "x-specroute-conversation": "c-reset"}, False),
                   ext_proc.ProcessingRequest(request_body=ext_proc.HttpBody(
                       body=json.dumps(chat({**ASKS[1], "stream": True})).encode(),
                       end_of_stream=True))])
    await picker.Process(pick.messages(), pick)  # type: ignore[arg-type]
    ours = ours_of(pick.written)
    content_type, answer, end_of_stream = ENDED_AT_THE_CLIENT.get(
        how, ("text/event-stream", WORDS, False))
    watch = Stream([watched(m, ours) for m in (
        headers_message({}, False),
        answered_by(destinations(pick.written)[0], content_type),
        ext_proc.ProcessingRequest(response_body=ext_proc.HttpBody(
            body=answer, end_of_stream=end_of_stream)))], reset=True)
    if end_of_stream:  # the picker ended the stream at the answer's end: no reset reached it
        await picker.Process(watch.messages(), watch)  # type: ignore[arg-type]
    else:
        with pytest.raises(asyncio.CancelledError):
            await picker.Process(watch.messages(), watch)  # type: ignore[arg-type]
    assert watch.written == []  # nobody waits on the watcher
    outcome = (await logged(sink))[0].outcome
    served = how in ENDED_AT_THE_CLIENT
    assert outcome.client_disconnected is not served
    assert len(app[SESSIONS]) == int(served)  # a served turn's instance holds the conversation
    assert sum(app[POOL].known_inflight(name, app[DEPS].clock()) for name in app[POOL].names) == 0


def request_stream(path: str, *chunks: bytes, answers_here: bool = False,
                   method: str = "POST") -> Stream:
    """A request's pick stream: its headers, then `chunks` (the last with end_of_stream)."""
    headers = headers_message({":method": method, ":path": path,
                               "content-type": "application/json"}, not chunks)
    if answers_here:  # a gateway's single filter: the answer comes on this stream too
        headers.protocol_config.response_body_mode = ProcessingMode.STREAMED
    return Stream([headers, *[ext_proc.ProcessingRequest(request_body=ext_proc.HttpBody(
        body=chunk, end_of_stream=i == len(chunks) - 1)) for i, chunk in enumerate(chunks)]])


async def test_the_picker_ends_each_stream_once_nothing_more_on_it_needs_it(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    # Envoy resets a stream still open when its request is over, and grpc.aio leaks each reset
    # stream's last batch: the picker ends its streams itself, and only when they are done
    app, sink = await sim_app(aiohttp_server, tmp_path)
    picker = Picker(app, fallbacks=False)
    body = json.dumps(chat(ASKS[1])).encode()
    streams = {
        "routed": request_stream("/v1/chat/completions", body[:20], body[20:]),
        "passed on to the default": request_stream("/v1/tokenize", b"{", b"}"),
        "refused": request_stream("/v1/chat/completions", method="DELETE"),
        "answered here": request_stream("/v1/chat/completions", body, answers_here=True),
    }
    for stream in streams.values():
        await picker.Process(stream.messages(), stream)  # type: ignore[arg-type]
    assert {how: s.read_past for how, s in streams.items()} == {
        "routed": 0, "passed on to the default": 0, "refused": 0,
        "answered here": 1}  # its answer comes next on it: it waits for Envoy's end
    await logged(sink)  # the one answered here: its stream ended before its answer, a cut
    sink.records.clear()
    assert len(streams["routed"].written) == 3  # the pick, a "go on" per chunk
    assert streams["passed on to the default"].written[1:] == [messages.REQUEST_BODY_CONTINUE] * 2
    ours = ours_of(streams["routed"].written)
    watch = Stream([watched(m, ours) for m in (
        headers_message({}, False), answered_by(destinations(streams["routed"].written)[0]),
        ext_proc.ProcessingRequest(response_body=ext_proc.HttpBody(
            body=json.dumps(WHOLE_ANSWER).encode(), end_of_stream=True)))])
    unrouted = Stream([watched(headers_message({}, False), {"exchange": ""}),
                       watched(answered_by("127.0.0.1:1"), {"exchange": ""})])
    edited = Stream([headers_message({":status": "200"}, False, response=True),
                     ext_proc.ProcessingRequest(response_body=ext_proc.HttpBody(
                         body=b"{}", end_of_stream=True))])
    for stream in (watch, unrouted, edited):
        await picker.Process(stream.messages(), stream)  # type: ignore[arg-type]
    assert (watch.read_past, unrouted.read_past, edited.read_past) == (0, 0, 0)
    assert len(edited.written) == 2  # the answer's headers and its chunk, each answered
    assert len(unrouted.steps) == 1  # nothing to watch: ended at its first message
    outcome = (await logged(sink))[0].outcome
    assert not outcome.client_disconnected and outcome.completion_tokens == 1
    await picker.exchanges.close()


WHOLE_ANSWER = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                "usage": {"prompt_tokens": 30, "completion_tokens": 1}}


@pytest.mark.parametrize("how", ["the engine breaks off", "the client leaves"])
async def test_an_answer_cut_short_is_recorded_as_cut_never_timed_nor_the_conversation_s_home(
        aiohttp_server: ServerFactory, tmp_path: Path, how: str) -> None:
    """Envoy resets or closes the picker's stream alike whichever end cut the answer (both
    seen for each), so the picker records what it knows: the answer did not reach its end."""
    e = await sim_engines(aiohttp_server)
    for state in e.states.values():
        state.time_scale = 1.0  # ~70 ms a token: the answer is under way when it ends
        if how == "the engine breaks off":
            state.faults.append(Fault("die_after", after_chunks=4))
    async with picker_front(aiohttp_server, tmp_path, e) as picker, aiohttp.ClientSession(
            timeout=TIMEOUT) as session:
        response = await session.post(picker.url + "/chat/completions",
                                      json=chat({**ASKS[1], "stream": True}),
                                      headers={"x-specroute-conversation": "cut-1"})
        assert response.status == 200
        await response.content.readany()
        if how == "the engine breaks off":
            with pytest.raises(aiohttp.ClientPayloadError):
                await response.read()
        response.close()
        await logged(picker.sink)
        app = picker.app
        assert sum(app[POOL].known_inflight(name, app[DEPS].clock())
                   for name in app[POOL].names) == 0  # the instance is free again
        assert len(app[SESSIONS]) == 0  # not the conversation's home
    record = picker.sink.records[0]
    assert record.outcome.client_disconnected
    observation = observation_from_record(record)
    assert observation is None or not observation.timed
