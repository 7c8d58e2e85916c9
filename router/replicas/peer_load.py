"""The replicas hear each other's load straight from each other, the store's channel where
they cannot.

The channel tells every replica each request's start and end, through the store: two hops and
the store's own turn. Where it is down, the engines' gauges, read every
`load.unheard_interval_s`, are all a replica sees of the others' requests: too stale at a few
clients a replica to see an instance freed a moment ago, so a request queues behind a nearly
done one while the other replica's instance is free (bench.replicas, store killed: 0.94-0.96 x
the run without). The replicas already know where each other is (the `replicas.url` each
publishes with its load, to be passed requests): each reads the others' work on a stream from
each (GET `PATH`, one line per message, the channel's own), one hop, with or without the store.
A replica heard on its stream is not also taken from the channel (one source at a time tells a
replica's work, never two in two orders); one that cannot be reached is heard on the channel.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Final

import aiohttp
import structlog
from aiohttp import web

from router.instances.pool import POOL
from router.replicas.link import REPLICAS, LoadApplier, ReplicaLink
from router.replicas.loops import load_applier
from router.replicas.peers import CLIENT_GONE, PEER_CONNECT_S, PEER_ERRORS, PEER_RETRY_S
from router.request.errors import error_response
from router.state import CONFIG, DEPS, SESSION, Addon

log = structlog.get_logger("specroute")

PATH: Final = "/specroute/replica-load"
# a message longer than this is not a replica's work (the store's limit on it is the same)
MAX_LINE: Final = 8 * 1024 * 1024
_STREAM_ERRORS: Final = (*PEER_ERRORS, ValueError)  # ValueError: not a stream of messages
# the streams this replica serves, ended when it shuts down (each would otherwise hold it open)
STREAMS = web.AppKey("peer_load_streams", set[asyncio.Task[Any]])


def add_routes(app: web.Application) -> None:
    app.router.add_get(PATH, serve_load)
    app[STREAMS] = set()
    app.on_shutdown.append(_end_streams)


async def serve_load(request: web.Request) -> web.StreamResponse:
    """This replica's work, as it publishes it on the channel: now, at each change, and every
    `replicas.load_interval_s` anyway (a quiet stream is a live one), until the peer leaves."""
    app = request.app
    link = app.get(REPLICAS)
    if link is None:
        return error_response(404, f"{PATH} is served by replicas that share a store "
                              "(replicas.store)", code="not_found")
    interval, pool, clock = app[CONFIG].replicas.load_interval_s, app[POOL], app[DEPS].clock
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson",
                                           "Cache-Control": "no-store"})
    await response.prepare(request)
    changed = asyncio.Event()
    unwatch = pool.watch(changed.set)
    peer = request.query.get("replica", "")
    link.listeners[peer] += 1  # it hears each change here: the channel need not tell it
    task = asyncio.current_task()
    if task is not None:
        app[STREAMS].add(task)
    try:
        while True:
            changed.clear()
            await response.write(link.load_message(pool.own_work(clock())).encode() + b"\n")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await changed.wait()
    except CLIENT_GONE:
        pass  # the peer left (it stopped, or its end of the stream broke)
    finally:
        unwatch()
        link.listeners[peer] -= 1
        if task is not None:
            app[STREAMS].discard(task)
    return response


async def _end_streams(app: web.Application) -> None:
    streams = app[STREAMS]
    for task in list(streams):
        task.cancel()


async def peer_streams(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx, after router/replicas/link': the follower, with a store configured."""
    link = app.get(REPLICAS)
    task = (asyncio.create_task(follow_peers(app, link, load_applier(app, link)))
            if link is not None else None)
    yield
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def follow_peers(app: web.Application, link: ReplicaLink, apply: LoadApplier) -> None:
    """A stream from each replica whose url it published (new ones looked for this often)."""
    interval = app[CONFIG].replicas.load_interval_s
    followed: dict[str, asyncio.Task[None]] = {}
    try:
        while True:
            for url in set(link.peer_urls.values()) - set(followed):
                followed[url] = asyncio.create_task(_follow(app, link, url, apply))
            await asyncio.sleep(interval)
    finally:
        for task in followed.values():
            task.cancel()
        await asyncio.gather(*followed.values(), return_exceptions=True)


async def _follow(app: web.Application, link: ReplicaLink, url: str, apply: LoadApplier) -> None:
    """One peer's stream, again after a pause when it breaks (longer while it keeps failing:
    a replica that is gone leaves its url behind). When it breaks, what it told of that replica
    stops counting at once, as when the channel breaks, and the channel tells it again."""
    config, pool = app[CONFIG], app[POOL]
    # the peer writes at least every load_interval_s: silence for load.max_age_s is a dead peer
    timeout = aiohttp.ClientTimeout(total=None, connect=PEER_CONNECT_S,
                                    sock_connect=PEER_CONNECT_S,
                                    sock_read=max(config.load.max_age_s,
                                                  2 * config.replicas.load_interval_s))
    pause = config.replicas.load_interval_s
    while True:
        heard, error = "", ""
        try:
            async with app[SESSION].get(
                    url + PATH, params={"replica": link.replica}, timeout=timeout,
                    allow_redirects=False) as response:
                if response.status != 200:
                    raise ValueError(f"answered {response.status}")
                async for line in _lines(response.content):
                    entry = link.read_load(line)
                    if entry is not None and entry[0] != link.replica:
                        if not heard:
                            log.info("replica_load_direct", replica=link.replica, peer=url)
                        heard = entry[0]
                        link.direct.add(heard)
                        apply(*entry)
        except _STREAM_ERRORS as exc:
            error = type(exc).__name__
        if heard:
            link.direct.discard(heard)
            pool.lost_others(heard)
            log.info("replica_load_direct_lost", replica=link.replica, peer=url, error=error)
            pause = config.replicas.load_interval_s
        else:
            pause = min(PEER_RETRY_S, 2 * pause)
        await asyncio.sleep(pause)


async def _lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The stream's lines as they complete (aiohttp's own line reader stops at 64 KiB; a
    replica with many requests in flight tells more)."""
    buffer = bytearray()
    async for chunk in content.iter_any():
        buffer += chunk
        while (end := buffer.find(b"\n")) >= 0:
            yield bytes(buffer[:end])
            del buffer[:end + 1]
        if len(buffer) > MAX_LINE:
            raise ValueError(f"a message longer than {MAX_LINE} bytes")


class PeerLoad(Addon):
    """`GET /specroute/replica-load` and the follower of each peer's (`add_routes`,
    `peer_streams`), as an add-on."""

    def add_routes(self, app: web.Application) -> None:
        add_routes(app)

    def cleanup_ctx(self, app: web.Application) -> AsyncIterator[None]:
        return peer_streams(app)
