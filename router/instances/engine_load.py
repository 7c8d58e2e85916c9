"""Reads each engine's own queue gauges in the background (`load.interval_s`, 0.1 s by default)
and hands them to the pool, where what they count beyond every replica's in-flight requests
(requests that bypassed specroute) joins the finish rule's queue. A scrape that fails, times
out or lies (backends.gauges) is dropped: the load it would have told ages out of the pool
(`load.max_age_s`) and is not guessed. While the other replicas are unheard (the store down),
the gauges are all a replica sees of their requests, and are read every
`load.unheard_interval_s` instead.
The decision never waits on a scrape.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import structlog
from aiohttp import web

from backends.capability import metrics_text
from backends.engines import adapter_for
from backends.gauges import EngineLoad, has_gauges, parse_gauges
from backends.spec import BackendSpec
from router.config import LoadConfig
from router.instances.pool import POOL
from router.state import CONFIG, DEPS, SESSION, Addon

log = structlog.get_logger("specroute")


@dataclass(slots=True)
class GaugeScrapes:
    """Counts for /metrics and /readyz: scrapes read, and those dropped, per instance."""

    ok: int = 0
    dropped: int = 0
    last_error: str = ""


# backend -> its gauge scrapes, for /metrics and /readyz
GAUGE_SCRAPES: web.AppKey[dict[str, GaugeScrapes]] = web.AppKey("gauge_scrapes")


def scraped(spec: BackendSpec) -> bool:
    """Whether the engine has queue gauges at a metrics path."""
    return has_gauges(spec.engine) and bool(adapter_for(spec).metrics_path)


async def engine_gauges(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: the scrape loop, when `load.gauges` is on and an engine has gauges."""
    config = app[CONFIG]
    specs = [spec for spec in config.backends if scraped(spec)]
    app[GAUGE_SCRAPES] = {spec.name: GaugeScrapes() for spec in specs}
    task = (asyncio.create_task(_loop(app, specs))
            if config.load.gauges and specs else None)
    yield
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _loop(app: web.Application, specs: list[BackendSpec]) -> None:
    config, pool, clock = app[CONFIG], app[POOL], app[DEPS].clock
    settings = config.load
    # with replicas, the pace is looked at this often while waiting: an outage speeds it up
    # within a step; one process sleeps the whole interval
    step = (min(settings.interval_s, settings.unheard_interval_s) if config.replicas.store
            else settings.interval_s)
    while True:
        await asyncio.gather(*(scrape_once(app, spec) for spec in specs))
        read_at = clock()
        while (left := read_at + scrape_interval(settings, pool.others_unheard(clock()))
               - clock()) > 0:
            await asyncio.sleep(min(left, step))


def scrape_interval(settings: LoadConfig, others_unheard: bool) -> float:
    """How long after a scrape the next one is due. While the other replicas are unheard,
    another replica's request on an instance shows only at the next scrape, and one that ended
    there still shows until then: each replica then sends requests where the other's just
    started, or past an instance just freed, for up to one interval. The faster pace is bounded,
    and only for the outage: a healthy channel tells each start and end within milliseconds."""
    if others_unheard:
        return min(settings.interval_s, settings.unheard_interval_s)
    return settings.interval_s


async def scrape_once(app: web.Application, spec: BackendSpec) -> EngineLoad | None:
    """One scrape of one engine, given to the pool when it is believable."""
    settings, counts, pool = app[CONFIG].load, app[GAUGE_SCRAPES][spec.name], app[POOL]
    known_at_send = pool.known_inflight(spec.name, app[DEPS].clock())
    load, error = await _read(app[SESSION], spec, settings.timeout_s)
    if load is None:
        if counts.last_error != error:  # once per change, not ten times a second
            log.warning("engine_gauges_dropped", backend=spec.name, error=error,
                        detail="its load from others is not counted until they read again")
        counts.dropped += 1
        counts.last_error = error
        return None
    if counts.last_error:
        log.info("engine_gauges_read", backend=spec.name, running=load.running,
                 waiting=load.waiting)
        counts.last_error = ""
    counts.ok += 1
    pool.note_engine_load(spec.name, load, app[DEPS].clock(), known_at_send)
    return load


async def _read(
    session: aiohttp.ClientSession, spec: BackendSpec, timeout_s: float
) -> tuple[EngineLoad | None, str]:
    text, error = await metrics_text(spec, adapter_for(spec), session,
                                     aiohttp.ClientTimeout(total=timeout_s))
    if text is None:
        return None, error
    load = parse_gauges(spec.engine, text)
    return load, "" if load is not None else "queue gauges missing or not believable"


class EngineGauges(Addon):
    """The background scrape of the engines' queue gauges (`engine_gauges`), as an add-on."""

    def cleanup_ctx(self, app: web.Application) -> AsyncIterator[None]:
        return engine_gauges(app)
