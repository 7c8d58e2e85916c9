"""An SSE answer through the real Envoy 1.40 (deploy/envoy/envoy.yaml as written) and
specroute's own picker, with an engine that waits, between its first event and the rest, until
the client has the first: the events reach the client as the engine writes them, and a picker
killed in the middle of one leaves that stream to finish (the answer's filters fail open) while
the next request gets deploy/envoy/envoy.yaml's 500."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
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
from tests.router.epp.test_picker import (
    ORIGINAL_DST,
    ROOT,
    Engines,
    config_for,
    engine_app,
    post,
)

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
    streams: list[str] = field(default_factory=list)  # per stream: "whole", or "cut" (by Envoy)

    def app(self) -> web.Application:
        async def chat(request: web.Request) -> web.StreamResponse:
            if not (await request.json()).get("stream"):
                return web.json_response(WHOLE)
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            try:
                await response.write(EVENTS[0])
                try:
                    await asyncio.wait_for(self.release.wait(), HOLD_S)
                    self.released.append(True)
                except TimeoutError:
                    self.released.append(False)
                for piece in EVENTS[1:]:
                    await response.write(piece)
                    await asyncio.sleep(0.02)
                await response.write_eof()
            except (ConnectionError, asyncio.CancelledError):  # the connection closed under it
                self.streams.append("cut")
                raise
            self.streams.append("whole")
            return response

        return engine_app(chat)


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
    assert engine.streams == ["whole"]


@contextlib.contextmanager
def specroute_epp(e: Engines, tmp: Path, grpc_port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A `specroute epp` process with the default `--endpoints`, stopped by its PID."""
    config = tmp / "config.yaml"
    config.write_text(
        "backends:\n" + "".join(
            f"  - {{name: {s.name}, engine: llamacpp, profile: {s.profile}, url: '{s.base_url}'}}\n"
            for s in e.specs)
        + f"tokenizer: false\nclassifier: rules\nlog: {{path: {tmp / 'epp.jsonl'}}}\n"
        "supervisor: {startup_probe: false}\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "router", "epp", "--config", str(config), "--grpc-port",
         str(grpc_port), "--port", str(free_loopback_port())],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=WAIT_S)


async def first_answer(url: str, process: subprocess.Popen[bytes]) -> int:
    """The status of the first whole answer through Envoy once the picker is up (bounded)."""
    status = 0
    for _ in range(150):  # bounded: 30 s for the picker to start
        assert process.poll() is None, "specroute epp exited early"
        with contextlib.suppress(aiohttp.ClientError):
            status = (await post(url, {**STREAM, "stream": False}))[0]
        if status == 200:
            break
        await asyncio.sleep(0.2)
    return status


async def test_the_picker_killed_mid_stream_lets_that_stream_finish_and_fails_the_next_with_a_500(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    # deploy/envoy/envoy.yaml: the answer under way goes on without its watcher (fail open);
    # with the picker down, a new request has nobody to pick for it: a 500 with an empty body
    require_envoy()
    engine = PacedEngine()
    e = await paced_engines(aiohttp_server, engine)
    grpc_port, listen = free_loopback_port(), free_loopback_port()
    text = render_config(ORIGINAL_DST, LISTEN_PORT=listen, PICKER_PORT=grpc_port,
                         ADMIN_PORT=free_loopback_port())
    url = f"http://127.0.0.1:{listen}/v1/chat/completions"
    with specroute_epp(e, tmp_path, grpc_port) as process:
        async with envoy_running(text, tmp_path / "envoy"):
            assert await first_answer(url, process) == 200  # the default --endpoints fits it
            async with (aiohttp.ClientSession(timeout=TIMEOUT) as session,
                        session.post(url, json=STREAM) as response):
                assert response.status == 200
                first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), WAIT_S)
                process.send_signal(signal.SIGKILL)  # by its PID, the answer's headers out
                await asyncio.to_thread(process.wait, WAIT_S)
                await asyncio.sleep(0.3)  # the engine writes the rest only after this
                engine.release.set()
                rest = await response.read()
            after = await post(url, STREAM)  # the picker down: no instance gets this one
    assert first + rest == b"".join(EVENTS)
    assert engine.streams == ["whole"]
    assert (after[0], after[2]) == (500, b"")
