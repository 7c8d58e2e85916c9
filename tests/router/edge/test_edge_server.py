"""The edges a hostile or unlucky client reaches: HTTP parse errors, the operator pages, /readyz
with no traffic, and a decision log that cannot be written."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from backends.local.simulator import create_sim_app
from router.app import create_app
from router.edge.admin import admin_allowed
from router.serve import start_site
from router.state import Deps
from tests.router.conftest import ServerFactory, Stack, start_stack

SECRET = "Bearer " + "a" * 9000
CHAT = {"model": "sim-model", "temperature": 0, "max_tokens": 8,
        "messages": [{"role": "user", "content": "Explain how a hash map resolves collisions."}]}


@pytest.fixture
async def served(stack: Stack) -> AsyncIterator[int]:
    """The stack's app run as `serve` runs it (our runner), on its own loopback port."""
    _, port, stop = await start_site(create_app(stack.config, deps=Deps(explore=False)))
    yield port
    await stop()


async def _raw_exchange(port: int, request: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


PARSE_ERRORS = {
    "8 KB header": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: "
                   + SECRET.encode() + b"\r\n\r\n",
    "9 KB path": b"GET /v1/" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "bad chunk": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-"
                 + b"a" * 40 + b"\r\nTransfer-Encoding: chunked\r\n"
                 b"Content-Type: application/json\r\n\r\nzz-not-hex\r\n{}\r\n0\r\n\r\n",
    "bad method": b"G@T /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
}


@pytest.mark.parametrize("case", list(PARSE_ERRORS))
async def test_parse_errors_are_json_errors_with_no_echo_and_one_warning(
    stack: Stack, served: int, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as events:
        status, body = await _raw_exchange(served, PARSE_ERRORS[case])
    assert 400 <= status < 500
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert b"aaaa" not in body and b"zz-not-hex" not in body
    warnings = [e for e in events if e["log_level"] in ("warning", "error")]
    assert len(warnings) == 1, events
    assert "exc_info" not in warnings[0]
    assert not [r for r in caplog.records if r.exc_info], "a traceback reached the log"
    assert stack.mtp.received == [] and stack.plain.received == []


def _request_from(peer: str, headers: dict[str, str] | None = None) -> web.Request:
    class Transport:
        def get_extra_info(self, name: str, default: object = None) -> object:
            return (peer, 50000) if name == "peername" else default

    return make_mocked_request("GET", "/metrics", headers=headers or {}, transport=Transport())


def test_admin_pages_answer_loopback_or_the_token_only() -> None:
    assert admin_allowed(_request_from("127.0.0.1"), "")
    assert admin_allowed(_request_from("::1"), "")
    assert not admin_allowed(_request_from("192.0.2.7"), "")
    assert not admin_allowed(_request_from("192.0.2.7", {"Authorization": "Bearer x"}), "")
    assert admin_allowed(_request_from("192.0.2.7", {"Authorization": "Bearer s3cret"}), "s3cret")
    assert not admin_allowed(_request_from("192.0.2.7", {"Authorization": "Bearer s3cre"}), "s3cret")
    assert not admin_allowed(_request_from("192.0.2.7", {"Authorization": "s3cret"}), "s3cret")


async def test_metrics_and_dashboard_answer_a_loopback_client(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        for path in ("/metrics", "/dashboard/data.json"):
            async with session.get(f"http://127.0.0.1:{stack.proxy.port}{path}") as response:
                assert response.status == 200, path


async def _readyz(port: int) -> dict[str, object]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/readyz") as response,
    ):
        return dict(await response.json())


def _health(ready: dict[str, object]) -> dict[str, bool]:
    backends = ready["backends"]
    assert isinstance(backends, list)
    return {str(b["name"]): bool(b["healthy"]) for b in backends}


async def test_readyz_notices_a_dead_backend_and_its_return_with_no_traffic(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    # Periodic probes a minute apart: what /readyz shows within seconds comes from elsewhere.
    stack = await start_stack(aiohttp_server, tmp_path, health_interval_s=60.0)
    port = stack.plain_server.port
    await stack.plain_server.close()
    seen: dict[str, bool] = {}
    for _ in range(40):  # bounded: ~8 s
        seen = _health(await _readyz(stack.proxy.port))
        if not seen["plain-0"]:
            break
        await asyncio.sleep(0.2)
    assert seen == {"mtp-0": True, "plain-0": False}
    await aiohttp_server(create_sim_app(stack.plain), port=port)  # back on the same port
    for _ in range(40):
        seen = _health(await _readyz(stack.proxy.port))
        if seen["plain-0"]:
            break
        await asyncio.sleep(0.2)
    assert seen == {"mtp-0": True, "plain-0": True}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_full_disk_costs_log_lines_not_requests(
    aiohttp_server: ServerFactory, tmp_path: Path, stream: bool
) -> None:
    stack = await start_stack(aiohttp_server, tmp_path, log_path="/dev/full")  # ENOSPC
    async with stack.client() as client:
        for _ in range(3):
            if stream:
                chunks = await client.chat.completions.create(**{**CHAT, "stream": True})
                assert "".join([c.choices[0].delta.content or "" async for c in chunks
                                if c.choices])
            else:
                reply = await client.chat.completions.create(**CHAT)
                assert reply.choices[0].message.content
    await stack.logged(3)  # the other sinks still got every record
    sinks = (await _readyz(stack.proxy.port))["record_sinks"]
    assert isinstance(sinks, dict)
    assert sinks["decision_log"]["failures"] == 3 and not sinks["decision_log"]["ok"]
    assert "No space left" in sinks["decision_log"]["last_error"]
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{stack.proxy.port}/metrics") as response,
    ):
        text = await response.text()
    assert 'specroute_record_sink_failures_total{sink="decision_log"} 3.0' in text
