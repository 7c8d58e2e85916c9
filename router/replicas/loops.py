"""The replicas' background work while the app runs (`replicas`, a cleanup_ctx, when
`replicas.store` is set): the learned sums published and the others' added (`sync_sums_once`),
this replica's load published as it changes, the served turns sent in batches, and the others'
turns and load followed, each through the one `ReplicaLink` (router/replicas/link).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from router.instances.pool import POOL, ReplicaLoad
from router.learning.online import ONLINE
from router.learning.relearn import relearn_own_log
from router.replicas.link import REPLICAS, LoadApplier, ReplicaLink, TurnApplier, replica_id
from router.state import CONFIG, DEPS, POLICY, SESSIONS, TURN_SHARERS, Addon

log = structlog.get_logger("specroute")


async def replicas(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: the store's loops, when `replicas.store` is set."""
    config = app[CONFIG]
    if not config.replicas.store:
        yield
        return
    link = ReplicaLink(config.replicas.store, replica_id(config), config.replicas.namespace,
                       config.replicas.timeout_s, clock=app[DEPS].clock)
    link.url = config.replicas.url
    app[REPLICAS] = link
    app[TURN_SHARERS].append(link.share_turn)
    app[POOL].share_with(link.replica)
    loops = [_sums_loop(app, link), _turns_loop(app, link),
             link.follow_turns(_turn_applier(app), app[POLICY].policy.stickiness.ttl_s,
                               config.replicas.sync_interval_s),
             _load_loop(app, link),
             link.follow_load(load_applier(app, link), config.replicas.load_interval_s,
                              functools.partial(app[POOL].lost_others, keep=link.direct))]
    tasks = [asyncio.create_task(loop) for loop in loops]
    log.info("replica_sharing", replica=link.replica, namespace=config.replicas.namespace,
             loops=len(tasks))
    yield
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks, timeout=2 * config.replicas.timeout_s + 1.0)
    if link.health.restored:  # the last word: what this replica learned until it stopped
        await link.publish_sums(app[ONLINE].own_sums())
    await link.close()


async def sync_sums_once(app: web.Application, link: ReplicaLink) -> None:
    """Restore (once), publish this replica's sums, add the others'."""
    online = app[ONLINE]
    if not link.health.restored and not await link.restore(online.restore_own):
        return  # never publish before reading back what this replica published before
    if not await link.publish_sums(online.own_sums()):
        return
    others = await link.others_sums()
    if others is None:
        return
    online.set_others(others)
    # also when no replica's work arrives; not while the store fails (returned above): the
    # others are unheard then, not gone, and the shares last dealt still keep them apart
    app[POOL].refresh_shares(app[DEPS].clock())


async def _sums_loop(app: web.Application, link: ReplicaLink) -> None:
    await relearn_own_log(app)  # what it wrote after its last publish, before it publishes
    interval = app[CONFIG].replicas.sync_interval_s
    while True:
        await sync_sums_once(app, link)
        await asyncio.sleep(interval)


async def _load_loop(app: web.Application, link: ReplicaLink) -> None:
    """Publish this replica's work as soon as it changes (what changes during one publish goes
    in the next), and every `load_interval_s` anyway (its elapsed times, and its liveness);
    only the latter while every other replica hears it on its stream (router/replicas/peer_load)."""
    config, pool, deps = app[CONFIG], app[POOL], app[DEPS]
    interval = config.replicas.load_interval_s
    changed = asyncio.Event()
    pool.watch(changed.set)
    while True:
        changed.clear()
        if not await link.publish_load(pool.own_work(deps.clock()), config.load.max_age_s):
            await asyncio.sleep(interval)  # a failing store is tried again, not hammered
            continue
        if link.heard_directly_by(pool.others()):
            await asyncio.sleep(interval)  # each change went to them on their streams
            continue
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval):
                await changed.wait()


def load_applier(app: web.Application, link: ReplicaLink) -> LoadApplier:
    pool, deps = app[POOL], app[DEPS]

    def apply(replica: str, work: ReplicaLoad) -> None:
        # a request started within the channel's latency of one of ours could not know of it,
        # nor ours of it: each way, once
        pool.note_replica_work(replica, work, deps.clock(), blind_s=2 * link.channel_latency_s)

    return apply


async def _turns_loop(app: web.Application, link: ReplicaLink) -> None:
    while True:
        await link.next_turns()
        await link.flush_turns()


def _turn_applier(app: web.Application) -> TurnApplier:
    sessions, pool, deps = app[SESSIONS], app[POOL], app[DEPS]
    names = set(pool.names)

    def apply(conversation: str, backend: str, profile: str, prompt_tokens: int,
              age_s: float) -> None:
        if backend in names:  # replicas configured with other instances: not ours to follow
            sessions.remember(conversation, backend, profile, prompt_tokens,
                              deps.clock() - age_s)

    return apply


class ReplicaSharing(Addon):
    """The replicas' loops through the store (`replicas`), as an add-on."""

    def cleanup_ctx(self, app: web.Application) -> AsyncIterator[None]:
        return replicas(app)
