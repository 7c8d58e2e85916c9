"""The simulator grows llama-server's queue gauges, so that load from elsewhere is testable."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from backends.gauges import EngineLoad, parse_gauges
from backends.local.simulator import SimState, create_sim_app


async def _gauges(client: TestClient[Any, Any]) -> EngineLoad | None:
    response = await client.get("/metrics")
    return parse_gauges("llamacpp", await response.text())


async def test_a_serial_engine_shows_one_processing_and_the_rest_deferred() -> None:
    state = SimState(profile="plain", serial=True, time_scale=1.0, reply_tokens=20)
    async with TestClient(TestServer(create_sim_app(state))) as client:
        assert await _gauges(client) == EngineLoad(0, 0)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        requests = [asyncio.create_task(client.post("/v1/chat/completions", json=body))
                    for _ in range(3)]
        for _ in range(100):  # bounded: 5 s
            if state.inflight == 3:
                break
            await asyncio.sleep(0.05)
        assert await _gauges(client) == EngineLoad(1, 2)
        for task in requests:
            (await task).release()
        assert await _gauges(client) == EngineLoad(0, 0)


async def test_gauges_can_be_made_to_lie() -> None:
    state = SimState(profile="plain", gauges="negative")
    async with TestClient(TestServer(create_sim_app(state))) as client:
        assert await _gauges(client) is None
        state.gauges = "garbage"
        assert await _gauges(client) is None
        state.gauges = "none"
        assert await _gauges(client) is None
