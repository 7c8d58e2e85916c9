"""The backends' life cycle inside the app: start what is launched, watch every backend's
health, probe the pair's capability at start, stop everything on shutdown.

Health transitions reach the pool (an unhealthy backend takes no traffic; its profile's traffic
fails over to the other profile) and the operator log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from backends.capability import capability_probe
from backends.supervisor import STOPPED, Supervisor, SupervisorSettings
from router.instances.pool import POOL
from router.state import CONFIG, PROBE, SESSION, SUPERVISOR, Addon

log = structlog.get_logger("specroute")


async def supervise(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: runs after the client session exists, stops before it closes."""
    config = app[CONFIG]
    settings = config.supervisor
    pool = app[POOL]

    def on_change(name: str, healthy: bool, why: str) -> None:
        pool.set_health(name, healthy, why)
        if why == STOPPED:
            return  # stopped as asked, on shutdown: one line for all of them, below
        spec = pool.runtime(name).spec.spec_key
        event = "backend_healthy" if healthy else "backend_unhealthy"
        (log.info if healthy else log.warning)(event, backend=name, spec=spec, reason=why)

    supervisor = Supervisor(
        config.backends, settings.log_dir, session=app[SESSION], on_change=on_change,
        settings=SupervisorSettings(health_interval_s=settings.health_interval_s,
                                    failures_to_restart=settings.restart_after_failed_probes),
    )
    app[SUPERVISOR] = supervisor
    await supervisor.start()  # raises BackendStartError with the backend's last log lines
    try:
        if settings.startup_probe:
            await _probe(app)
        yield
    finally:
        await supervisor.stop()
        launched = [spec.name for spec in config.backends if spec.launch is not None]
        if launched:
            log.info("backends_stopped", backends=launched)


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
