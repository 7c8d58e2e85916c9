"""Failover before the first byte, error events after it, and client disconnects."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import openai

from backends.local.simulator import Fault, SimState
from tests.router.conftest import ServerFactory, Stack, start_stack
from tests.router.test_proxy_openai import GREEDY_TECH


async def test_refused_connection_fails_over_to_the_other_profile(stack: Stack) -> None:
    await stack.mtp_server.close()  # nothing listens on the mtp port any more
    async with stack.client() as client:
        raw = await client.chat.completions.with_raw_response.create(**GREEDY_TECH)
    assert raw.headers["x-specroute-backend"] == "plain-0"
    record = stack.last
    assert record.decision["backend"] == "mtp-0"
    assert record.outcome.backend == "plain-0"
    assert record.outcome.failover_from == ("mtp-0",)
    assert record.outcome.status == 200


async def test_connection_dropped_before_any_byte_twice_fails_over(stack: Stack) -> None:
    stack.mtp.faults.extend([Fault("refuse"), Fault("refuse")])
    async with stack.client() as client:
        reply = await client.chat.completions.create(**{**GREEDY_TECH, "stream": False})
    assert reply.choices[0].message.content
    assert stack.last.outcome.failover_from == ("mtp-0",)
    assert len(stack.mtp.received) == 2 and len(stack.plain.received) == 1


async def test_connection_dropped_once_is_retried_on_the_same_backend(stack: Stack) -> None:
    """A stale keep-alive connection is not an outage: no failover, nothing marked failed."""
    stack.mtp.faults.append(Fault("refuse"))
    async with stack.client() as client:
        raw = await client.chat.completions.with_raw_response.create(**GREEDY_TECH)
        assert raw.headers["x-specroute-backend"] == "mtp-0"
        assert raw.parse().choices[0].message.content
        stream = await client.chat.completions.create(**{**GREEDY_TECH, "stream": True})
        assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    records = await stack.logged(2)
    assert [r.outcome.backend for r in records] == ["mtp-0", "mtp-0"]
    assert [r.outcome.failover_from for r in records] == [(), ()]
    assert all("failover" not in r.decision["reason"] for r in records)  # not marked failed
    assert len(stack.mtp.received) == 3 and stack.plain.received == []


async def test_server_error_fails_over_and_stream_still_arrives(stack: Stack) -> None:
    stack.mtp.faults.append(Fault("status", status=503))
    async with stack.client() as client:
        stream = await client.chat.completions.create(**{**GREEDY_TECH, "stream": True})
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text
    assert stack.last.outcome.backend == "plain-0"


async def test_failure_mid_stream_ends_with_an_error_event(stack: Stack) -> None:
    stack.mtp.faults.append(Fault("die_after", after_chunks=3))
    async with stack.client() as client:
        stream = await client.chat.completions.create(**{**GREEDY_TECH, "stream": True})
        received: list[str] = []
        try:
            async for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")
        except openai.APIError as exc:
            assert "stream broke" in str(exc)
        else:
            raise AssertionError("a broken stream must end with an error event")
    assert len([t for t in received if t]) == 3
    assert "stream broke" in stack.last.outcome.error
    assert stack.plain.received == []  # bytes were already out: no silent retry


async def test_all_backends_down_is_a_502_and_readyz_says_so(stack: Stack) -> None:
    await stack.mtp_server.close()
    await stack.plain_server.close()
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{stack.base_url}/chat/completions", json=GREEDY_TECH) as r:
            assert r.status == 502
            error = (await r.json())["error"]
        async with session.get(f"http://127.0.0.1:{stack.proxy.port}/readyz") as r:
            assert r.status == 503
            assert (await r.json())["ready"] is False
        async with session.get(f"http://127.0.0.1:{stack.proxy.port}/healthz") as r:
            assert r.status == 200
    assert error["code"] == "all_backends_failed"
    assert "mtp-0" in error["message"] and "plain-0" in error["message"]


async def test_client_disconnect_cancels_the_upstream_request(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    slow = SimState(profile="mtp", reply_tokens=200, time_scale=1.0)  # ~70 ms a token
    stack = await start_stack(aiohttp_server, tmp_path, mtp=slow)
    async with aiohttp.ClientSession() as session, session.post(
        f"{stack.base_url}/chat/completions", json={**GREEDY_TECH, "stream": True}
    ) as response:
        assert response.status == 200
        await response.content.readline()  # the first bytes arrived; now hang up
    for _ in range(100):  # bounded: 5 s at most
        if slow.cancelled:
            break
        await asyncio.sleep(0.05)
    assert slow.cancelled == 1
    assert slow.inflight == 0
    assert (await stack.logged(1))[-1].outcome.client_disconnected is True


async def test_a_cancelled_handler_still_logs_who_served_what(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    """As `specroute serve` and aiohttp's test server run it (handler_cancellation): a client
    hanging up cancels the handler mid-stream, and the record still names the backend and what
    it measured."""
    slow = SimState(profile="mtp", reply_tokens=200, time_scale=1.0)
    stack = await start_stack(aiohttp_server, tmp_path, mtp=slow)
    async with aiohttp.ClientSession() as session, session.post(
        f"{stack.base_url}/chat/completions", json={**GREEDY_TECH, "stream": True}
    ) as response:
        async for line in response.content:
            if b'"content"' in line:
                break  # the first token arrived; now hang up
    outcome = (await stack.logged(1))[-1].outcome
    assert outcome.client_disconnected is True
    assert (outcome.backend, outcome.profile, outcome.status) == ("mtp-0", "mtp", 200)
    assert outcome.ttft_ms is not None


async def test_failover_record_round_trips(stack: Stack) -> None:
    stack.mtp.faults.append(Fault("status", status=503))
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stack.base_url}/chat/completions", json=GREEDY_TECH) as r,
    ):
        assert r.status == 200
        json.loads(await r.read())
    assert stack.last.outcome.failover_from == ("mtp-0",)
