"""The gauge scraper against real simulated engines: believable gauges reach the pool, lying,
slow or absent ones are dropped and counted, and a client that bypasses the router counts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from backends.local.simulator import SimState
from router.config import LoadConfig
from router.instances.engine_load import GAUGE_SCRAPES, scrape_interval, scrape_once
from router.instances.pool import POOL
from router.state import DEPS
from tests.router.conftest import ServerFactory, start_stack


@pytest.mark.parametrize("lie", ["negative", "garbage", "none", "slow"])
async def test_gauges_that_lie_or_time_out_are_ignored(
        aiohttp_server: ServerFactory, tmp_path: Path, lie: str) -> None:
    stack = await start_stack(aiohttp_server, tmp_path, plain=SimState(profile="plain", gauges=lie))
    app = stack.proxy.app
    spec = next(s for s in stack.config.backends if s.name == "plain-0")
    before = app[GAUGE_SCRAPES]["plain-0"].dropped
    assert await scrape_once(app, spec) is None
    scrapes = app[GAUGE_SCRAPES]["plain-0"]
    assert scrapes.dropped == before + 1 and scrapes.last_error
    assert scrapes.ok == 0  # none believed, from the first scrape on
    assert app[POOL].others_inflight("plain-0", app[DEPS].clock()) == 0
    async with aiohttp.ClientSession() as session, session.get(
            f"http://127.0.0.1:{stack.proxy.port}/metrics") as response:
        text = await response.text()
    assert 'specroute_gauge_scrapes_dropped_total{backend="plain-0"}' in text


async def test_a_client_that_bypasses_the_router_counts_in_the_finish_rule(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    plain = SimState(profile="plain", time_scale=1.0, reply_tokens=30)
    stack = await start_stack(aiohttp_server, tmp_path, plain=plain)
    app = stack.proxy.app
    url = f"http://127.0.0.1:{stack.plain_server.port}/v1/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "a story, please"}]}
    async with aiohttp.ClientSession() as session:
        direct = asyncio.create_task(session.post(url, json=body))
        for _ in range(100):  # bounded: 5 s (the scraper reads every 0.1 s)
            if app[POOL].others_inflight("plain-0", app[DEPS].clock()) == 1:
                break
            await asyncio.sleep(0.05)
        plain_state = next(s for s in app[POOL].states(app[DEPS].clock()) if s.name == "plain-0")
        assert plain_state.inflight == 1  # not ours, and counted
        (await direct).release()


@pytest.mark.parametrize(("interval", "unheard_interval", "unheard", "pause"), [
    (0.1, 0.025, False, 0.1),  # the others heard (or none about): the configured pace
    (0.1, 0.025, True, 0.025),  # unheard: the gauges are all there is, read faster
    (0.1, 0.5, True, 0.1),  # never slower than the configured pace
])
def test_the_gauges_are_read_faster_only_while_the_other_replicas_are_unheard(
        interval: float, unheard_interval: float, unheard: bool, pause: float) -> None:
    settings = LoadConfig(interval_s=interval, unheard_interval_s=unheard_interval)
    assert scrape_interval(settings, unheard) == pause
