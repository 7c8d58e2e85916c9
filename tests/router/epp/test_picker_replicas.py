"""`specroute epp` as one replica among others: the picker (its app and serve_grpc, behind the
real Envoy running deploy/envoy/envoy.yaml) and a proxy replica share one real redis-server
(`replicas.store`), as two proxies do in tests/router/test_replicas.py: a conversation's turn
the picker served, and a request it has in flight, are seen by the proxy replica."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai

from backends.local.cache import free_loopback_port
from backends.local.envoy import render_config
from backends.local.redisserver import RedisServer
from router.epp.server import serve_grpc
from router.replicas.link import REPLICAS
from tests.backends.local.test_envoy import envoy_running, require_envoy
from tests.router.conftest import ServerFactory
from tests.router.epp.test_picker import ORIGINAL_DST
from tests.router.replicas.test_replicas import (
    LONG_TURN,
    STORY,
    Fleet,
    eventually,
    fleet,
    one_in_flight,
    others_on,
    replica,
    replica_config,
)
from tests.router.replicas.test_replicas import client as proxy_client


@contextlib.asynccontextmanager
async def picker_replica(aiohttp_server: ServerFactory, f: Fleet, store: str,
                         **fields: Any) -> AsyncIterator[tuple[Any, openai.AsyncOpenAI]]:
    """Replica "epp": specroute's picker behind Envoy; its app's server, and a client that
    sends through Envoy."""
    require_envoy()
    server = await replica(aiohttp_server,
                           replica_config(f, "epp", store).model_copy(update=fields))
    listen = free_loopback_port()
    async with serve_grpc(server.app, "127.0.0.1", 0, fallbacks=False) as grpc_port:
        text = render_config(ORIGINAL_DST, LISTEN_PORT=listen, PICKER_PORT=grpc_port,
                             ADMIN_PORT=free_loopback_port())
        async with (envoy_running(text, f.tmp / "envoy"),
                    openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{listen}/v1", api_key="k",
                                       max_retries=0) as through_envoy):
            yield server, through_envoy


async def test_a_turn_the_picker_served_sends_the_next_one_on_the_proxy_to_its_instance(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2)
    pools = {"pools": {"second": ["plain-1"]}}
    proxy = await replica(aiohttp_server,
                          replica_config(f, "proxy", store.url).model_copy(update=pools))
    async with picker_replica(aiohttp_server, f, store.url, **pools) as (picker, through_envoy):
        first = await through_envoy.chat.completions.with_raw_response.create(
            **LONG_TURN, extra_headers={"x-specroute-conversation": "conv-1",
                                        "x-specroute-route": "second"})
        assert first.headers["x-specroute-backend"] == "plain-1"
        sent = {name.lower() for name in f.states["plain-1"].received[-1]["headers"]}
        assert "x-specroute-route" not in sent and "x-specroute-conversation" not in sent
        await eventually(lambda: picker.app[REPLICAS].health.conversations_out == 1,
                         "the picker shared the turn")
    await eventually(lambda: proxy.app[REPLICAS].health.conversations_in >= 1,
                     "the proxy replica hears of it")
    async with proxy_client(proxy) as c:
        second = await c.chat.completions.with_raw_response.create(
            **LONG_TURN, extra_headers={"x-specroute-conversation": "conv-1"})
        # the same prompt in another conversation goes where the tie-break says
        other = await c.chat.completions.with_raw_response.create(
            **LONG_TURN, extra_headers={"x-specroute-conversation": "conv-2"})
    assert second.headers["x-specroute-backend"] == "plain-1"
    assert other.headers["x-specroute-backend"] == "plain-0"


async def test_a_request_the_picker_has_in_flight_counts_in_the_proxy_replica_s_load(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    # openai: the engines show no queue gauges, so only what the picker publishes can tell
    f = await fleet(aiohttp_server, tmp_path, engine="openai", plains=2, time_scale=1.0)
    proxy = await replica(aiohttp_server, replica_config(f, "proxy", store.url))
    async with picker_replica(aiohttp_server, f, store.url) as (_, through_envoy):
        sent, busy = await one_in_flight(through_envoy, f)
        await eventually(lambda: others_on(proxy, busy) == 1, "the proxy counts it")
        async with proxy_client(proxy) as c:
            by_proxy = await c.chat.completions.with_raw_response.create(**STORY)
        by_picker = await sent
    assert by_picker.headers["x-specroute-backend"] == busy
    assert by_proxy.headers["x-specroute-backend"] != busy
    await eventually(lambda: others_on(proxy, busy) == 0, "the proxy sees it end")
