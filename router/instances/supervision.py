"""The backends' life cycle inside the app: start what is launched, watch every backend's
health, probe the pair's capability at start, stop everything on shutdown.

Health transitions reach the pool (an unhealthy backend takes no traffic; its profile's traffic
fails over to the other profile) and the operator log. Each time a backend becomes healthy (at
start, after a restart) its slots are read again (`backends.capability.engine_slots`, resolved
by `backends.slots`) and set in the pool; the start waits for the first reads. A failed read
never fails the start: the count falls back to the launch flags, the declared one, or 1.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import structlog
from aiohttp import web

from backends.capability import capability_probe, engine_slots
from backends.slots import Slots, slots_of
from backends.spec import BackendSpec
from backends.supervisor import STOPPED, Supervisor, SupervisorSettings
from router.instances.pool import POOL
from router.state import CONFIG, PROBE, SESSION, SUPERVISOR, Addon

log = structlog.get_logger("specroute")


async def supervise(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: runs after the client session exists, stops before it closes."""
    config = app[CONFIG]
    settings = config.supervisor
    pool = app[POOL]
    specs = {spec.name: spec for spec in config.backends}
    reads: set[asyncio.Task[None]] = set()
    for spec in config.backends:  # before any answer: ds4's 1, the launch flags, the declared
        _set_slots(app, spec, slots_of(spec, None), "")

    def on_change(name: str, healthy: bool, why: str) -> None:
        pool.set_health(name, healthy, why)
        if why == STOPPED:
            return  # stopped as asked, on shutdown: one line for all of them, below
        spec = pool.runtime(name).spec.spec_key
        event = "backend_healthy" if healthy else "backend_unhealthy"
        (log.info if healthy else log.warning)(event, backend=name, spec=spec, reason=why)
        if healthy:  # started or restarted: its slots may have changed
            task = asyncio.create_task(read_slots(app, specs[name]))
            reads.add(task)
            task.add_done_callback(reads.discard)

    supervisor = Supervisor(
        config.backends, settings.log_dir, session=app[SESSION], on_change=on_change,
        settings=SupervisorSettings(health_interval_s=settings.health_interval_s,
                                    failures_to_restart=settings.restart_after_failed_probes),
    )
    app[SUPERVISOR] = supervisor
    try:
        await supervisor.start()  # raises BackendStartError with the backend's last log lines
        await asyncio.gather(*reads)  # every instance's slots before the first request
    except BaseException:
        await _cancel(reads)
        raise
    try:
        if settings.startup_probe:
            await _probe(app)
        yield
    finally:
        await _cancel(reads)
        await supervisor.stop()
        launched = [spec.name for spec in config.backends if spec.launch is not None]
        if launched:
            log.info("backends_stopped", backends=launched)


SLOTS_TIMEOUT_S = 5.0


async def read_slots(app: web.Application, spec: BackendSpec) -> None:
    """Ask `spec`'s engine for its slots and set in the pool what they resolve to."""
    reported, error = await engine_slots(spec, app[SESSION],
                                         aiohttp.ClientTimeout(total=SLOTS_TIMEOUT_S))
    _set_slots(app, spec, slots_of(spec, reported), error)


def _set_slots(app: web.Application, spec: BackendSpec, slots: Slots, error: str) -> None:
    app[POOL].set_slots(spec.name, slots.slots, slots.source, slots.warning)
    contradicted = bool(slots.warning) and slots.source != "default"
    (log.warning if contradicted else log.debug)(
        "backend_slots", backend=spec.name, slots=slots.slots, source=slots.source,
        **({"detail": slots.warning} if slots.warning else {}),
        **({"read_error": error} if error else {}))


async def _cancel(tasks: set[asyncio.Task[None]]) -> None:
    for task in list(tasks):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _probe(app: web.Application) -> None:
    """Refuse a pair that does not serve the same model; warn, naming the backend, where a
    speculating instance drafted on neither probe (or a plain one drafts)."""
    result = await capability_probe(app[CONFIG].backends, app[SESSION])
    for name, warnings in result.backend_warnings.items():
        for warning in warnings:
            log.warning("capability_warning", backend=name, detail=warning)
    for warning in result.general_warnings:
        log.warning("capability_warning", detail=warning)
    result.raise_for_errors()
    log.info("capability_ok", model=result.common_model, drafted=dict(result.drafted))
    app[PROBE] = result  # its timed answers become the log's first records (router.app)


class Supervision(Addon):
    """The supervisor and the start-up probe (`supervise`), as an add-on."""

    def cleanup_ctx(self, app: web.Application) -> AsyncIterator[None]:
        return supervise(app)
