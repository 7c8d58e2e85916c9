"""The simulated engine's batching instances: up to `slots` requests decode at once, each at the
batch's per-token time (its reported timings say so), the rest wait; one slot is as before."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from backends.gauges import EngineLoad, parse_gauges
from backends.local.simulator import MACHINES, CostModel, SimState, create_sim_app, decode_plan

CPU, GPU = MACHINES["cpu-batch"], MACHINES["gpu-batch"]
BODY: dict[str, Any] = {"model": "m", "temperature": 0,
                        "messages": [{"role": "user", "content": "Explain the cache."}]}


async def _timings(client: TestClient[Any, Any], stream: bool = False) -> dict[str, Any]:
    response = await client.post("/v1/chat/completions", json={**BODY, "stream": stream})
    if not stream:
        timings: dict[str, Any] = (await response.json())["timings"]
        return timings
    events = [line[6:] for line in (await response.text()).splitlines()
              if line.startswith("data: {")]
    return next(json.loads(e)["timings"] for e in events if "timings" in json.loads(e))


def _ms_per_token(timings: dict[str, Any]) -> float:
    return float(timings["predicted_ms"]) / int(timings["predicted_n"])


@pytest.mark.parametrize("stream", [False, True])
async def test_four_at_once_on_a_cpu_cost_each_about_four_times_one_alone(stream: bool) -> None:
    state = SimState(profile="plain", cost=CPU, slots=4, reply_tokens=40, time_scale=0.05)
    async with TestClient(TestServer(create_sim_app(state))) as client:
        alone = _ms_per_token(await _timings(client, stream))
        together = await asyncio.gather(*(_timings(client, stream) for _ in range(4)))
    # the CPU curve: a batch of 4 costs 1 + 0.88 * 3 = 3.64 steps alone (joins and leaves are
    # not quite simultaneous, so a little less)
    ratios = [_ms_per_token(t) / alone for t in together]
    assert all(2.6 < r < 4.2 for r in ratios), ratios


async def test_requests_past_the_slots_wait_and_the_gauges_count_them() -> None:
    state = SimState(profile="plain", cost=CPU, slots=2, reply_tokens=20, time_scale=0.5)
    async with TestClient(TestServer(create_sim_app(state))) as client:
        assert (await (await client.get("/props")).json())["total_slots"] == 2
        tasks = [asyncio.create_task(_timings(client)) for _ in range(3)]
        for _ in range(100):  # bounded: 5 s
            if state.inflight == 3:
                break
            await asyncio.sleep(0.05)
        gauges = parse_gauges("llamacpp", await (await client.get("/metrics")).text())
        assert gauges == EngineLoad(2, 1)
        assert state.batcher.running == 2
        timings = await asyncio.gather(*tasks)
        gauges = parse_gauges("llamacpp", await (await client.get("/metrics")).text())
    assert gauges == EngineLoad(0, 0)
    # two decoded together (1.88x a step alone), the third mostly alone once one left
    per_token = sorted(_ms_per_token(t) for t in timings)
    assert per_token[-1] > 1.4 * per_token[0], per_token


@pytest.mark.parametrize("profile", ["plain", "mtp"])
async def test_one_request_on_a_batching_instance_is_paced_as_on_one_slot(profile: str) -> None:
    async def timings(slots: int) -> dict[str, Any]:
        state = SimState(profile=profile, cost=GPU, slots=slots, reply_tokens=30)
        async with TestClient(TestServer(create_sim_app(state))) as client:
            return await _timings(client)

    one, batching = await timings(1), await timings(8)
    assert one["predicted_ms"] == pytest.approx(batching["predicted_ms"], rel=1e-6)
    plan = decode_plan(SimState(profile=profile, cost=GPU, reply_tokens=30), BODY)
    assert one["predicted_ms"] == pytest.approx(plan.total_s * 1000, rel=1e-3)


async def test_one_slot_reports_one_slot_and_serves_as_before() -> None:
    state = SimState(profile="plain", reply_tokens=10, time_scale=0.05)
    async with TestClient(TestServer(create_sim_app(state))) as client:
        assert (await (await client.get("/props")).json())["total_slots"] == 1
        together = await asyncio.gather(*(_timings(client) for _ in range(3)))
    # not a batching instance: each on its own at full pace, as ever
    assert [t["predicted_ms"] for t in together] == [pytest.approx(0.05 * 68.0 * 10)] * 3


def _cost_at(cost: CostModel, profile: str, batch: int) -> float:
    plan = decode_plan(SimState(profile=profile, cost=cost, reply_tokens=200), BODY)
    extra = plan.extra_s or (0.0,) * len(plan.step_s)
    return sum(cost.at_batch(s - e, e, batch) for s, e in zip(plan.step_s, extra))


@pytest.mark.parametrize(("cost", "alone_above", "at_8_below"), [
    (GPU, 1.1, 1.0),   # speculation wins alone, loses in a full batch
    (CPU, 1.1, 1.15),  # fades, less: the plain steps are dear too
])
def test_speculations_gain_fades_with_the_batch(cost: CostModel, alone_above: float,
                                                at_8_below: float) -> None:
    gain = {b: _cost_at(cost, "plain", b) / _cost_at(cost, "mtp", b) for b in (1, 2, 4, 8)}
    assert gain[1] > alone_above
    assert gain[1] > gain[2] > gain[4] > gain[8]
    assert gain[8] < at_8_below


def test_at_batch_is_the_cost_alone_at_one_and_the_curves_at_more() -> None:
    assert CPU.at_batch(10.0, 2.0, 1) == 12.0
    assert CPU.at_batch(10.0, 0.0, 4) == pytest.approx(10.0 * 3.64)
    assert GPU.at_batch(10.0, 0.0, 8) == pytest.approx(12.8)
    assert GPU.at_batch(0.0, 2.0, 8) == pytest.approx(2.0 * 4.5)


@pytest.mark.parametrize("slots", [0, -1, 1.5])
def test_slots_must_be_a_positive_integer(slots: Any) -> None:
    with pytest.raises(ValueError, match="slots"):
        SimState(profile="plain", slots=slots)
