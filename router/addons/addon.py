"""An add-on: an optional part of the proxy, kept off the request path (after mitmproxy's
addons). Each brings what it serves, what it does with each record, and the work it runs while
the app runs; `install` wires all three into an app. It overrides only what it uses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from aiohttp import web

from decisionlog.records import RouteRecord
from router.learning.sinks import SINKS


class Addon:
    """No routes, ignores records, runs nothing: subclasses override what they need."""

    sink_name = "addon"  # names the add-on where its records are accounted for

    def add_routes(self, app: web.Application) -> None:
        """Add the add-on's HTTP routes to `app`."""

    def write_record(self, record: RouteRecord) -> None:
        """Take one decision-log record (called once per request, after the decision log)."""

    async def cleanup_ctx(self, app: web.Application) -> AsyncIterator[None]:
        """Set up before the app serves, tear down after (an aiohttp `cleanup_ctx`)."""
        yield


def install(app: web.Application, addons: Sequence[Addon]) -> None:
    """Each add-on's routes on `app`, the add-on among its record sinks, its cleanup_ctx run."""
    for addon in addons:
        addon.add_routes(app)
        app[SINKS].append(addon)
        app.cleanup_ctx.append(addon.cleanup_ctx)
