"""Add-ons: `install` wires an add-on's routes, record sink and cleanup_ctx into an app; the
proxy's own add-ons (metrics, dashboard) read the app's state when asked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient

from backends.local.simulator import SimState
from decisionlog.records import RouteRecord
from router.app import install
from router.learning.sinks import SINKS
from router.state import Addon
from tests.decisionlog.examples import make_record
from tests.router.conftest import ServerFactory, start_stack
from tests.router.test_proxy_openai import GREEDY_TECH


class Recorder(Addon):
    sink_name = "recorder"

    def __init__(self) -> None:
        self.records: list[RouteRecord] = []
        self.lifetime: list[str] = []

    def add_routes(self, app: web.Application) -> None:
        async def count(request: web.Request) -> web.Response:
            return web.json_response({"records": len(self.records)})

        app.router.add_get("/recorder", count)

    def write_record(self, record: RouteRecord) -> None:
        self.records.append(record)

    async def cleanup_ctx(self, app: web.Application) -> AsyncIterator[None]:
        self.lifetime.append("started")
        yield
        self.lifetime.append("stopped")


async def test_install_wires_routes_sink_and_lifetime(aiohttp_client: object) -> None:
    app = web.Application()
    app[SINKS] = []
    recorder, silent = Recorder(), Addon()
    install(app, [recorder, silent])
    assert app[SINKS] == [recorder]  # one that takes no records is no sink (a loop's add-on)
    client: TestClient = await aiohttp_client(app)  # type: ignore[operator]
    assert recorder.lifetime == ["started"]
    for sink in app[SINKS]:
        sink.write_record(make_record())
    response = await client.get("/recorder")
    assert (await response.json()) == {"records": 1}
    await client.close()
    assert recorder.lifetime == ["started", "stopped"]


async def _get(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200
        return await response.text()


async def test_metrics_read_backend_health_and_restarts_when_scraped(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    stack = await start_stack(aiohttp_server, tmp_path, mtp=SimState(profile="mtp"),
                              health_interval_s=0.05)
    async with aiohttp.ClientSession() as session, session.post(
        f"{stack.base_url}/chat/completions", json=GREEDY_TECH
    ) as response:
        assert response.status == 200
    metrics = await _get(f"http://127.0.0.1:{stack.proxy.port}/metrics")
    assert 'specroute_backend_healthy{backend="mtp-0",spec="mtp"} 1.0' in metrics
    assert 'specroute_backend_healthy{backend="plain-0",spec="plain"} 1.0' in metrics
    assert "specroute_requests_total{" in metrics
    await stack.mtp_server.close()
    for _ in range(200):  # bounded: the supervisor probes every 0.05 s
        metrics = await _get(f"http://127.0.0.1:{stack.proxy.port}/metrics")
        if 'specroute_backend_healthy{backend="mtp-0",spec="mtp"} 0.0' in metrics:
            break
        await asyncio.sleep(0.05)
    assert 'specroute_backend_healthy{backend="mtp-0",spec="mtp"} 0.0' in metrics
