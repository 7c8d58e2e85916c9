"""A request whose best instance is in another replica's share goes through that replica.

Pure: which replica a request is passed to. With a real `redis-server` and real replicas in
front of simulated engines: the owner takes and records it, the client gets the engine's
answer; a peer that cannot be reached costs nothing but the try.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import redis

from backends.local.redisserver import RedisServer
from router.app import create_app
from router.peers import PEER_RETRY_S, VIA, PassedOn, peer_for
from router.state import DEPS, POOL, REPLICAS, Deps
from tests.router.conftest import ListSink, ServerFactory
from tests.router.test_replicas import (
    STORY,
    Fleet,
    client,
    eventually,
    fleet,
    free_port,
    replica_config,
)

URLS = {"b": "http://127.0.0.1:9"}


def test_a_request_goes_to_the_owner_of_its_free_instance_once_at_most() -> None:
    assert peer_for("b", "a", URLS, {}, queue_ms=0.0) == URLS["b"]
    assert peer_for("b", "a", URLS, {}, queue_ms=250.0) == ""  # queued there anyway: no race
    assert peer_for("a", "a", URLS, {}, queue_ms=0.0) == ""  # its own share: sent from here
    assert peer_for("", "a", URLS, {}, queue_ms=0.0) == ""  # no shares dealt (alone)
    assert peer_for("c", "a", URLS, {}, queue_ms=0.0) == ""  # an owner that published no url
    assert peer_for("b", "a", URLS, {VIA: "c"}, queue_ms=0.0) == ""  # passed on once already


def test_a_peer_that_did_not_take_a_request_rests_before_it_is_tried_again() -> None:
    passed = PassedOn()
    url = URLS["b"]
    assert passed.usable(url, now=0.0)
    passed.not_taken_by(url, now=10.0)
    assert not passed.usable(url, now=10.0 + PEER_RETRY_S / 2)
    assert passed.usable(url, now=10.0 + PEER_RETRY_S)
    passed.taken(url)
    assert (passed.answered, passed.not_taken) == (1, 1) and passed.usable(url, now=10.0)


async def forwarding(aiohttp_server: ServerFactory, f: Fleet, name: str, store_url: str) -> Any:
    """A replica that tells the others where to reach it."""
    port = free_port()
    config = replica_config(f, name, store_url, url=f"http://127.0.0.1:{port}")
    return await aiohttp_server(create_app(config, deps=Deps(
        sinks=(ListSink(),), explore=False, record_interval_s=0.0)), port=port)


def served(server: Any) -> list[str]:
    """The instances of the requests this replica recorded."""
    sink = server.app[DEPS].sinks[0]
    assert isinstance(sink, ListSink)
    return [r.outcome.backend for r in sink.records]


async def test_a_request_for_an_instance_in_another_replica_s_share_goes_through_it(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2, time_scale=1.0)
    a = await forwarding(aiohttp_server, f, "a", store.url)
    b = await forwarding(aiohttp_server, f, "b", store.url)
    await eventually(lambda: "b" in a.app[REPLICAS].peer_urls, "A knows where B is")
    pool = a.app[POOL]
    await eventually(lambda: pool.owner("plain-0") != pool.owner("plain-1"), "dealt out")
    mine = next(n for n in ("plain-0", "plain-1") if pool.owner(n) == "a")
    theirs = next(n for n in ("plain-0", "plain-1") if pool.owner(n) == "b")
    async with client(a) as ca:
        first = asyncio.create_task(ca.chat.completions.with_raw_response.create(**STORY))
        await eventually(lambda: f.states[mine].serving == 1, "A's first on its own plain")
        second = await ca.chat.completions.with_raw_response.create(**STORY)
        assert (await first).headers["x-specroute-backend"] == mine
    # the free plain is B's: B placed it, B recorded it, and the client got the engine's answer
    assert second.headers["x-specroute-backend"] == theirs
    assert second.parse().choices[0].message.content
    await eventually(lambda: served(b) == [theirs], "B recorded it")
    assert served(a) == [mine]  # once only: A recorded its own request, not the one it passed
    [sent] = f.states[theirs].received
    assert VIA not in {k.lower() for k in sent["headers"]}  # the engine sees no hop between us


async def test_a_peer_that_cannot_be_reached_costs_only_the_try(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2, time_scale=1.0)
    a = await forwarding(aiohttp_server, f, "a", store.url)
    await eventually(lambda: a.app[REPLICAS].health.state == "ok", "A follows the store")
    raw = redis.Redis.from_url(store.url)
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    pool = a.app[POOL]

    def announce() -> None:  # replica b, as it would publish itself, then gone
        raw.publish("t:load", json.dumps({"replica": "b", "work": {}, "url": dead}))

    for _ in range(100):  # bounded: until A has dealt b its share and knows its url
        announce()
        await asyncio.sleep(0.02)
        if a.app[REPLICAS].peer_urls.get("b") == dead and pool.owner("plain-0") == "b":
            break
    theirs = next(n for n in ("plain-0", "plain-1") if pool.owner(n) == "b")
    mine = next(n for n in ("plain-0", "plain-1") if pool.owner(n) == "a")
    async with client(a) as ca:
        first = asyncio.create_task(ca.chat.completions.with_raw_response.create(**STORY))
        await eventually(lambda: f.states[mine].serving == 1, "A's first on its own plain")
        announce()  # still heard from
        second = await ca.chat.completions.with_raw_response.create(**STORY)
        assert (await first).http_response.status_code == 200
    # the free plain is b's, b did not answer: sent from here, as with no peer
    assert second.http_response.status_code == 200
    assert second.headers["x-specroute-backend"] == theirs
    assert sorted(served(a)) == sorted([mine, theirs])
