"""The replicas hear each other's load straight from each other, the store up or down.

Real `redis-server`, real replicas in front of simulated engines, the gauges read once a minute
(outage or not): only the replicas' streams to each other can show A the request B sends once
the store is gone.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import redis
from aiohttp import web

from backends.local.redisserver import RedisServer
from router.app import create_app
from router.config import LoadConfig
from router.instances.pool import POOL
from router.replicas.link import REPLICAS
from router.replicas.peer_load import PATH, STREAMS
from router.state import DEPS, Deps
from tests.router.conftest import ListSink, ServerFactory
from tests.router.replicas.test_replicas import (
    STORY,
    Fleet,
    client,
    eventually,
    fleet,
    free_port,
    one_in_flight,
    others_on,
    readyz,
    replica_config,
    send,
)

# the gauges: read at start, then not for a minute, with the store down too
STALE_GAUGES = LoadConfig(interval_s=60.0, unheard_interval_s=60.0, max_age_s=1.0)


async def reachable(aiohttp_server: ServerFactory, f: Fleet, name: str, store_url: str) -> Any:
    """A replica that publishes where the others reach it."""
    port = free_port()
    config = replica_config(f, name, store_url, url=f"http://127.0.0.1:{port}").model_copy(
        update={"load": STALE_GAUGES})
    return await aiohttp_server(create_app(config, deps=Deps(
        sinks=(ListSink(),), explore=False, record_interval_s=0.0)), port=port)


async def outage(store: RedisServer, *replicas: Any) -> None:
    """Both replicas know where the other is, then the store is killed."""
    await eventually(lambda: all(r.app[REPLICAS].peer_urls for r in replicas),
                     "each knows where the other is")
    store.stop(signal.SIGKILL)
    await eventually(lambda: not any(r.app[REPLICAS].channel_up for r in replicas),
                     "the channel is down")


async def test_with_the_store_killed_a_replica_hears_the_other_s_request_from_it(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2, time_scale=1.0)
    a = await reachable(aiohttp_server, f, "a", store.url)
    b = await reachable(aiohttp_server, f, "b", store.url)
    await outage(store, a, b)
    await eventually(lambda: len(b.app[STREAMS]) == 1, "B streams its load to A")
    await eventually(lambda: not a.app[POOL].others_unheard(a.app[DEPS].clock()),
                     "A hears B again, without the store")
    async with client(a) as ca, client(b) as cb:
        first, busy = await one_in_flight(cb, f)
        await eventually(lambda: others_on(a, busy) == 1, "A hears of it from B")
        assert a.app[POOL].runtime(busy).bypass == 0  # told by B, not read from the gauges
        second = await ca.chat.completions.with_raw_response.create(**STORY)
        assert (await first).headers["x-specroute-backend"] == busy
        await eventually(lambda: others_on(a, busy) == 0, "and of its end")
    assert second.headers["x-specroute-backend"] != busy


async def test_a_replica_heard_from_its_stream_is_not_also_taken_from_the_channel(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2)
    a = await reachable(aiohttp_server, f, "a", store.url)
    b = await reachable(aiohttp_server, f, "b", store.url)
    await eventually(lambda: "b" in a.app[REPLICAS].direct and len(b.app[STREAMS]) == 1,
                     "A hears B straight from B, the store up")
    raw = redis.Redis.from_url(store.url)
    stale = {"replica": "b", "work": {"plain-0": [[5000, 0]]}}  # not what B tells on its stream
    seen = []
    for _ in range(10):  # looked at soon after each, before B's stream tells its next
        raw.publish("t:load", json.dumps(stale))
        await asyncio.sleep(0.005)
        seen.append(others_on(a, "plain-0"))
    assert a.app[REPLICAS].channel_up
    assert seen == [0] * 10  # one source at a time: B's own stream
    assert (await readyz(a))["store"]["load_direct"] == ["b"]
    async with aiohttp.ClientSession() as session, session.get(
            f"http://127.0.0.1:{a.port}/metrics") as response:
        assert "specroute_replica_load_direct 1.0" in await response.text()


async def test_a_peer_s_stream_that_breaks_stops_counting_at_once(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2)
    a = await reachable(aiohttp_server, f, "a", store.url)
    streams: list[int] = []

    async def peer(request: web.Request) -> web.StreamResponse:
        """Replica b: one request on plain-0, its stream broken 0.3 s later, then unable."""
        streams.append(1)
        if len(streams) > 1:
            return web.Response(status=503)
        response = web.StreamResponse()
        await response.prepare(request)
        told = {"replica": "b", "work": {"plain-0": [[5000, 0]]},
                "url": f"http://127.0.0.1:{request.url.port}"}
        await response.write(json.dumps(told).encode() + b"\n")
        await asyncio.sleep(0.3)
        assert request.transport is not None
        request.transport.close()
        return response

    fake = web.Application()
    fake.router.add_get(PATH, peer)
    b = await aiohttp_server(fake)
    link = a.app[REPLICAS]
    await eventually(lambda: link.health.state == "ok", "A follows the store")
    link.peer_urls["b"] = f"http://127.0.0.1:{b.port}"
    await eventually(lambda: others_on(a, "plain-0") == 1, "A hears b's request from b")
    await eventually(lambda: len(streams) > 1, "b's stream broke", seconds=1.0)
    # at once: well before it would expire (load.max_age_s, 1 s after b's message)
    await eventually(lambda: others_on(a, "plain-0") == 0, "what b told stops counting",
                     seconds=0.3)


async def test_a_peer_s_garbage_is_not_believed(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2)
    a = await reachable(aiohttp_server, f, "a", store.url)
    bad = [b"not json", json.dumps({"replica": "b", "work": {"plain-0": [[1, -5]]}}).encode(),
           json.dumps({"replica": "b", "work": {"plain-0": "many"}}).encode()]

    async def liar(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for line in bad:
            await response.write(line + b"\n")
        good = {"replica": "b", "work": {}, "url": f"http://127.0.0.1:{request.url.port}"}
        await response.write(json.dumps(good).encode() + b"\n")
        await asyncio.sleep(30)  # bounded: the test ends first
        return response

    fake = web.Application()
    fake.router.add_get(PATH, liar)
    b = await aiohttp_server(fake)
    link = a.app[REPLICAS]
    link.peer_urls["b"] = f"http://127.0.0.1:{b.port}"
    await eventually(lambda: link.health.state == "ok", "A follows the store")
    store.stop(signal.SIGKILL)
    await eventually(lambda: link.health.bad_entries >= len(bad), "garbage counted")
    await eventually(lambda: not a.app[POOL].others_unheard(a.app[DEPS].clock()),
                     "the good message heard")
    assert others_on(a, "plain-0") == 0  # nothing of the garbage counts


async def test_the_stream_is_only_served_by_replicas_that_share_a_store(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    f = await fleet(aiohttp_server, tmp_path)
    alone = await aiohttp_server(create_app(replica_config(f, "alone", store_url=""),
                                            deps=Deps(sinks=(ListSink(),))))
    async with aiohttp.ClientSession() as session, session.get(
            f"http://127.0.0.1:{alone.port}{PATH}") as response:
        assert response.status == 404
        assert (await response.json())["error"]["code"] == "not_found"


async def test_the_channel_carries_only_the_heartbeat_while_every_replica_hears_the_stream(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2)
    servers = []
    for name in ("a", "b"):
        port = free_port()
        config = replica_config(f, name, store.url, url=f"http://127.0.0.1:{port}")
        slow = config.replicas.model_copy(update={"load_interval_s": 1.0})  # the heartbeat
        servers.append(await aiohttp_server(create_app(
            config.model_copy(update={"replicas": slow, "load": STALE_GAUGES.model_copy(
                update={"max_age_s": 5.0})}),
            deps=Deps(sinks=(ListSink(),), explore=False, record_interval_s=0.0)), port=port))
    a, b = servers
    await eventually(lambda: a.app[REPLICAS].heard_directly_by(a.app[POOL].others())
                     and "a" in b.app[REPLICAS].direct, "B follows A's stream")
    pubsub = redis.Redis.from_url(store.url).pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe("t:load")
    await send(a, 6)  # 12 changes of A's work: each on B's stream, none on the channel
    assert len(a.app[DEPS].sinks[0].records) == 6  # A sent them all itself
    await asyncio.sleep(0.5)
    from_a = 0
    for _ in range(100):  # bounded: what came in meanwhile (None: nothing, or a confirmation)
        message = pubsub.get_message(timeout=0.005)
        if message is not None:
            from_a += json.loads(message["data"])["replica"] == "a"
    pubsub.close()
    assert from_a <= 2  # the heartbeat (1 s) alone
