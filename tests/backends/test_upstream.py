"""The relay's `answered` hook: awaited once the engine's answer is all in, before the client
gets its end (so that other replicas can hear the instance is free first), and never for an
answer that broke off. Real servers on loopback: an engine double and a proxy around forward."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backends.measure import StreamMeter
from backends.upstream import ForwardResult, Outbound, Target, forward

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
EVENTS = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', b"data: [DONE]\n\n"]
SESSION = web.AppKey("session", aiohttp.ClientSession)
ANSWER = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}


def engine(*, broken: bool = False) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        if not (await request.json()).get("stream"):
            return web.json_response(ANSWER)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(EVENTS[0])
        if broken:  # the engine dies mid-answer
            assert request.transport is not None
            request.transport.close()
            return response
        await response.write(EVENTS[1])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


class Proxy:
    """forward() to one engine, with a hook that waits for the test's go."""

    def __init__(self, engine_url: str) -> None:
        self.engine_url = engine_url
        self.called = asyncio.Event()
        self.go = asyncio.Event()
        self.calls = 0

    async def answered(self) -> None:
        self.calls += 1
        self.called.set()
        await self.go.wait()

    def app(self) -> web.Application:
        async def handle(request: web.Request) -> web.StreamResponse:
            result = ForwardResult(meter=StreamMeter(started_at=time.monotonic()))
            target = Target("plain-0", "plain", self.engine_url)
            return await forward(Outbound(request, request.app[SESSION], [target], request.path,
                                          await request.read(), clock=time.monotonic,
                                          answered=self.answered), result)

        async def session(app: web.Application) -> Any:
            app[SESSION] = aiohttp.ClientSession()
            yield
            await app[SESSION].close()

        app = web.Application()
        app.cleanup_ctx.append(session)
        app.router.add_post("/v1/chat/completions", handle)
        return app


async def _ask(url: str, stream: bool) -> tuple[int, bytes]:
    body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session, session.post(
            url + "/v1/chat/completions", json=body) as response:
        return response.status, await response.read()


@pytest.mark.parametrize("stream", [False, True])
async def test_the_hook_runs_once_the_answer_is_in_and_before_the_client_has_its_end(
        aiohttp_server: ServerFactory, stream: bool) -> None:
    upstream = await aiohttp_server(engine())
    proxy = Proxy(f"http://127.0.0.1:{upstream.port}")
    front = await aiohttp_server(proxy.app())
    asking = asyncio.create_task(_ask(f"http://127.0.0.1:{front.port}", stream))
    await asyncio.wait_for(proxy.called.wait(), 5.0)
    await asyncio.sleep(0.2)  # time enough for the client to finish, were the end already sent
    assert not asking.done()
    proxy.go.set()
    status, body = await asyncio.wait_for(asking, 5.0)
    assert status == 200 and proxy.calls == 1
    assert body == (b"".join(EVENTS) if stream else json.dumps(ANSWER).encode())


async def test_an_answer_that_broke_off_is_not_answered(aiohttp_server: ServerFactory) -> None:
    upstream = await aiohttp_server(engine(broken=True))
    proxy = Proxy(f"http://127.0.0.1:{upstream.port}")
    proxy.go.set()
    front = await aiohttp_server(proxy.app())
    status, body = await asyncio.wait_for(_ask(f"http://127.0.0.1:{front.port}", True), 5.0)
    assert status == 200 and b"backend_failed" in body  # the stream's error event
    assert proxy.calls == 0
