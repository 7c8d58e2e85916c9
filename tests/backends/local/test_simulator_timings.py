"""The simulator reports its timings in the time it was paced at, as a real engine's clock would."""

from __future__ import annotations

import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from backends.local.simulator import SimState, create_sim_app

BODY = {"model": "m", "temperature": 0, "messages": [{"role": "user", "content": "hi"}]}


async def _timings(state: SimState) -> tuple[dict[str, Any], float]:
    async with TestClient(TestServer(create_sim_app(state))) as client:
        began = time.perf_counter()
        response = await client.post("/v1/chat/completions", json=BODY)
        payload = await response.json()
        return payload["timings"], (time.perf_counter() - began) * 1000.0


async def test_a_paced_simulator_reports_the_time_its_clock_saw() -> None:
    unpaced, _ = await _timings(SimState(profile="plain", reply_tokens=10))
    paced, wall_ms = await _timings(SimState(profile="plain", reply_tokens=10, time_scale=0.05))
    assert paced["predicted_n"] == unpaced["predicted_n"] == 10
    assert paced["predicted_ms"] == pytest.approx(0.05 * unpaced["predicted_ms"], rel=1e-3)
    # what it reports was really spent: the answer took at least that long
    assert wall_ms >= paced["predicted_ms"]
    assert paced["predicted_per_second"] == pytest.approx(20 * unpaced["predicted_per_second"],
                                                          rel=1e-3)
