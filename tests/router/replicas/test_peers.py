"""A request whose best instance is in another replica's share goes through that replica.

Pure: which replica a request is passed to, and which passed request its owner declines.
With a real `redis-server` and real replicas in front of simulated engines: the owner takes and
records it, the client gets the engine's answer; an owner whose share is busy declines a
request it would place in the sender's share, and the sender places it in its own; a peer that
cannot be reached costs nothing but the try.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import redis
from aiohttp import web

from backends.local.redisserver import RedisServer
from router.app import create_app
from router.instances.pool import POOL
from router.replicas.link import REPLICAS
from router.replicas.peers import DECLINED, PEER_RETRY_S, VIA, PassedOn, declines, peer_for
from router.state import DEPS, Deps
from tests.router.conftest import ListSink, ServerFactory
from tests.router.replicas.test_replicas import (
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


def test_the_owner_declines_only_what_it_would_place_in_its_sender_s_share() -> None:
    assert declines("a", owner="a")  # the sender knows its own share exactly: its to place
    assert not declines("a", owner="b")  # the owner's own share: placed there
    assert not declines("a", owner="c")  # a third replica's: sent from the owner, as before
    assert not declines("", owner="a")  # not passed on: a client's request is never declined
    assert not declines("a", owner="")  # no shares dealt


def test_a_peer_that_did_not_take_a_request_rests_before_it_is_tried_again() -> None:
    passed = PassedOn()
    url = URLS["b"]
    assert passed.usable(url, now=0.0)
    passed.not_taken_by(url, now=10.0)
    assert not passed.usable(url, now=10.0 + PEER_RETRY_S / 2)
    assert passed.usable(url, now=10.0 + PEER_RETRY_S)
    passed.taken(url)
    assert (passed.answered, passed.not_taken) == (1, 1) and passed.usable(url, now=10.0)
    passed.declined_by(url)  # a peer that declined is there: not rested
    assert passed.declined == 1 and passed.usable(url, now=10.0)


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


async def announced(a: Any, store_url: str, url: str) -> Callable[[], None]:
    """Replica b published on A's store, idle, reached at `url`, until A has dealt b its share
    and knows its url; returns what publishes it again."""
    raw = redis.Redis.from_url(store_url)

    def announce() -> None:
        raw.publish("t:load", json.dumps({"replica": "b", "work": {}, "url": url}))

    for _ in range(100):  # bounded
        announce()
        await asyncio.sleep(0.02)
        if a.app[REPLICAS].peer_urls.get("b") == url and a.app[POOL].owner("plain-0") == "b":
            break
    return announce


async def test_a_peer_that_cannot_be_reached_costs_only_the_try(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2, time_scale=1.0)
    a = await forwarding(aiohttp_server, f, "a", store.url)
    await eventually(lambda: a.app[REPLICAS].health.state == "ok", "A follows the store")
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    announce = await announced(a, store.url, dead)  # as b would publish itself, then gone
    pool = a.app[POOL]
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


async def shares(a: Any, b: Any) -> tuple[str, str]:
    """A's plain and B's plain, once both replicas have dealt the instances out alike."""
    pool_a, pool_b = a.app[POOL], b.app[POOL]
    await eventually(lambda: pool_a.owner("plain-0") != pool_a.owner("plain-1") != "" and all(
        pool_a.owner(n) == pool_b.owner(n) for n in ("plain-0", "plain-1")), "dealt out alike")
    mine = next(n for n in ("plain-0", "plain-1") if pool_a.owner(n) == "a")
    theirs = next(n for n in ("plain-0", "plain-1") if pool_a.owner(n) == "b")
    return mine, theirs


async def test_an_owner_whose_share_is_busy_declines_to_place_a_request_in_its_sender_s(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2, time_scale=1.0)
    a = await forwarding(aiohttp_server, f, "a", store.url)
    b = await forwarding(aiohttp_server, f, "b", store.url)
    mine, theirs = await shares(a, b)
    async with client(b) as cb:
        first = asyncio.create_task(cb.chat.completions.with_raw_response.create(**STORY))
        await eventually(lambda: f.states[theirs].serving == 1, "B's own plain busy")
        # A passes B a story (plain is its best): B's plain is busy, A's is free
        async with aiohttp.ClientSession() as session, session.post(
                f"http://127.0.0.1:{b.port}/v1/chat/completions", json=STORY,
                headers={VIA: "a"}) as answer:
            status, headers, body = answer.status, answer.headers, await answer.json()
        await first
    assert status == 409 and headers[DECLINED] == "b"
    assert body["error"]["code"] == "replica_declined"
    assert f.states[mine].received == []  # B sent nothing to A's plain: A places it itself
    await eventually(lambda: served(b) == [theirs], "B recorded its own request")
    assert served(b) == [theirs]  # and nothing for the one it declined


async def declining_peer(aiohttp_server: ServerFactory, seen: list[str]) -> str:
    """Replica b as a peer whose share is always busy: it declines whatever it is passed."""
    async def decline(request: web.Request) -> web.Response:
        seen.append(request.headers.get(VIA, ""))
        await request.read()
        return web.json_response({"error": {"code": "replica_declined"}}, status=409,
                                 headers={DECLINED: "b"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", decline)
    server = await aiohttp_server(app)
    return f"http://127.0.0.1:{server.port}"


async def test_a_declined_request_is_placed_in_the_sender_s_own_share(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2, time_scale=1.0)
    a = await forwarding(aiohttp_server, f, "a", store.url)
    await eventually(lambda: a.app[REPLICAS].health.state == "ok", "A follows the store")
    seen: list[str] = []
    url = await declining_peer(aiohttp_server, seen)
    announce = await announced(a, store.url, url)  # b, idle as far as A can tell
    pool = a.app[POOL]
    mine = next(n for n in ("plain-0", "plain-1") if pool.owner(n) == "a")
    async with client(a) as ca:
        first = asyncio.create_task(ca.chat.completions.with_raw_response.create(**STORY))
        await eventually(lambda: f.states[mine].serving == 1, "A's first on its own plain")
        announce()  # still heard from, still idle: b's plain looks free
        second = await ca.chat.completions.with_raw_response.create(**STORY)
        assert (await first).http_response.status_code == 200
    assert seen == ["a"]  # passed to b once, and declined
    assert second.http_response.status_code == 200
    assert pool.owner(second.headers["x-specroute-backend"]) == "a"  # placed in A's own share
    assert second.parse().choices[0].message.content
    link = a.app[REPLICAS]
    assert (link.passed_on.declined, link.passed_on.not_taken) == (1, 0)
    assert link.passed_on.usable(url, a.app[DEPS].clock())  # b is there: not rested
    await eventually(lambda: len(served(a)) == 2, "A recorded both")
