"""An SSE answer through the real Envoy 1.40 (deploy/envoy/envoy.yaml as written) and
specroute's own picker, with an engine that waits, between its first event and the rest, until
the client has the first: the events reach the client as the engine writes them, and a picker
killed in the middle of one cuts that stream as deploy/envoy/envoy.yaml says."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

from backends.local.cache import free_loopback_port
from backends.local.envoy import render_config
from backends.spec import BackendSpec
from router.app import create_app
from router.epp.server import serve_grpc
from router.state import Deps
from tests.backends.local.test_envoy import envoy_running, require_envoy
from tests.router.conftest import ListSink, ServerFactory
from tests.router.epp.test_picker import ORIGINAL_DST, Engines, config_for

WAIT_S = 10.0  # every wait on the other side is bounded by this
HOLD_S = 4.0  # how long the engine waits for the client to have its first event
TIMEOUT = aiohttp.ClientTimeout(total=WAIT_S * 3)


def sse(content: str) -> bytes:
    chunk = {"id": "x", "object": "chat.completion.chunk", "model": "sim-model",
             "choices": [{"index": 0, "delta": {"content": content}}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


EVENTS = [sse(word) for word in ("The", " sea", " is", " calm", ".")] + [b"data: [DONE]\n\n"]
STREAM = {"model": "sim-model", "stream": True,
          "messages": [{"role": "user", "content": "Tell me a short story about the sea."}]}
WHOLE = {"id": "x", "object": "chat.completion", "model": "sim-model", "choices": [
    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Calm."}}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}


@dataclass
class PacedEngine:
    """An engine double: a streamed answer's first event, then a wait until `release` is set
    (at most HOLD_S), then the rest; a whole answer at once."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    released: list[bool] = field(default_factory=list)  # per stream: released before HOLD_S
    rest_sent: list[bool] = field(default_factory=list)  # per stream: the rest written whole

    def app(self) -> web.Application:
        async def chat(request: web.Request) -> web.StreamResponse:
            if not (await request.json()).get("stream"):
                return web.json_response(WHOLE)
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(EVENTS[0])
            try:
                await asyncio.wait_for(self.release.wait(), HOLD_S)
                self.released.append(True)
            except TimeoutError:
                self.released.append(False)
            try:
                for piece in EVENTS[1:]:
                    await response.write(piece)
                    await asyncio.sleep(0.02)
                await response.write_eof()
            except ConnectionError:  # Envoy cut the stream
                self.rest_sent.append(False)
                return response
            self.rest_sent.append(True)
            return response

        async def health(request: web.Request) -> web.Response:
            return web.json_response({"status": "ok"})

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/health", health)
        return app


async def paced_engines(aiohttp_server: ServerFactory, engine: PacedEngine) -> Engines:
    """An mtp and a plain instance, both `engine`."""
    servers = {name: await aiohttp_server(engine.app()) for name in ("mtp-0", "plain-0")}
    specs = [BackendSpec(name=name, engine="llamacpp", profile=name.split("-")[0],
                         url=f"http://127.0.0.1:{server.port}") for name, server in servers.items()]
    return Engines({}, servers, specs)


@contextlib.asynccontextmanager
async def behind_envoy(aiohttp_server: ServerFactory, tmp: Path, e: Engines,
                       edit: Callable[[str], str] = lambda text: text) -> AsyncIterator[str]:
    """specroute's picker (its app, serve_grpc) behind Envoy running envoy.yaml through `edit`;
    gives the chat completions URL."""
    require_envoy()
    app = create_app(config_for(e, tmp, "epp"),
                     deps=Deps(sinks=(ListSink(),), explore=False, record_interval_s=0.0))
    await aiohttp_server(app)
    listen = free_loopback_port()
    async with serve_grpc(app, "127.0.0.1", 0, fallbacks=False) as grpc_port:
        text = edit(render_config(ORIGINAL_DST, LISTEN_PORT=listen, PICKER_PORT=grpc_port,
                                  ADMIN_PORT=free_loopback_port()))
        async with envoy_running(text, tmp / "envoy"):
            yield f"http://127.0.0.1:{listen}/v1/chat/completions"


async def test_each_sse_event_reaches_the_client_before_the_engine_writes_the_next(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    engine = PacedEngine()
    e = await paced_engines(aiohttp_server, engine)
    async with (behind_envoy(aiohttp_server, tmp_path, e) as url,
                aiohttp.ClientSession(timeout=TIMEOUT) as session,
                session.post(url, json=STREAM) as response):
        assert response.status == 200
        first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), WAIT_S)
        engine.release.set()  # the engine writes the rest only now (or after HOLD_S)
        rest = await response.read()
    # a picker (or an Envoy) that held the answer until its end would give the client the first
    # event only once the engine had given up waiting and written the last
    assert engine.released == [True]
    assert first == EVENTS[0] and first + rest == b"".join(EVENTS)
    assert engine.rest_sent == [True]
