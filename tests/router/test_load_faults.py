"""Load and faults on loopback, bounded in count and time: many concurrent streams relayed byte
for byte, a backend killed mid-run, a decision log whose directory goes away while serving."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer

from backends.local.simulator import SimState
from tests.router.conftest import ServerFactory, Stack, start_stack

STREAMS = 256
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=60)


def _chat(i: int, *, stream: bool, tokens: int = 24) -> dict[str, object]:
    return {"model": "sim-model", "temperature": 0, "max_tokens": tokens, "stream": stream,
            "messages": [{"role": "user", "content": f"Question {i}: how does a B-tree split?"}]}


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, object]
                ) -> tuple[int, dict[str, str], bytes]:
    async with session.post(url, json=body) as response:
        return response.status, dict(response.headers), await response.read()


def _backend_url(stack: Stack, name: str) -> str:
    server = stack.mtp_server if name == "mtp-0" else stack.plain_server
    return f"http://127.0.0.1:{server.port}/v1/chat/completions"


async def test_256_concurrent_streams_arrive_byte_identical(stack: Stack) -> None:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=REQUEST_TIMEOUT) as session:
        proxied = await asyncio.gather(*(
            _post(session, f"{stack.base_url}/chat/completions", _chat(i, stream=True))
            for i in range(STREAMS)))
        direct = await asyncio.gather(*(
            _post(session, _backend_url(stack, headers["x-specroute-backend"]), _chat(i, stream=True))
            for i, (_, headers, _) in enumerate(proxied)))
    for i, ((status, _, body), (_, _, expected)) in enumerate(zip(proxied, direct)):
        assert status == 200
        assert body == expected, f"stream {i} differs from the backend's own bytes"
        assert body.endswith(b"data: [DONE]\n\n")
    records = await stack.logged(STREAMS)
    assert len({r.request_id for r in records}) == STREAMS
    assert all(r.outcome.status == 200 and not r.outcome.error for r in records)


async def _kill(server: TestServer) -> None:
    """As a SIGKILL looks from the network: the port refuses, open connections are reset."""
    assert server.runner is not None and server.runner.server is not None
    for site in list(server.runner.sites):
        await site.stop()
    for handler in server.runner.server.connections:
        if handler.transport is not None:
            handler.transport.abort()


async def test_a_backend_killed_mid_run_loses_no_request_that_could_be_served(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    # Paced replies (about a second each) so that requests are in flight when mtp-0 dies;
    # requests go to mtp-0 by header, so the kill hits them.
    mtp = SimState(profile="mtp", time_scale=1.0, reply_tokens=24)
    stack = await start_stack(aiohttp_server, tmp_path, mtp=mtp)
    url = f"{stack.base_url}/chat/completions"

    async def one(i: int, stream: bool) -> tuple[int, dict[str, str], bytes]:
        async with (
            aiohttp.ClientSession(timeout=REQUEST_TIMEOUT) as session,
            session.post(url, json=_chat(i, stream=stream),
                         headers={"x-specroute-route": "mtp"}) as response,
        ):
            return response.status, dict(response.headers), await response.read()

    first = [asyncio.ensure_future(one(i, stream=i % 2 == 0)) for i in range(32)]
    for _ in range(250):  # bounded: until mtp-0 is streaming to some of them
        if mtp.inflight >= 8:
            break
        await asyncio.sleep(0.02)
    assert mtp.inflight >= 8
    await _kill(stack.mtp_server)
    later = [asyncio.ensure_future(one(100 + i, stream=i % 2 == 0)) for i in range(16)]
    answers = await asyncio.gather(*first, *later)

    cut = 0
    for index, (status, headers, body) in enumerate(answers):
        assert status == 200, (index, status, body[:200])  # none lost, none a 5xx
        stream = index % 2 == 0 if index < 32 else (index - 32) % 2 == 0
        if not stream:  # nothing had reached the client: served elsewhere, whole
            assert json.loads(body)["choices"][0]["message"]["content"]
            continue
        if body.endswith(b"data: [DONE]\n\n"):
            continue
        cut += 1  # bytes had already gone out: the stream ends with an error event
        last_event = body.strip().split(b"\n\n")[-1]
        assert last_event.startswith(b"data: ")
        assert json.loads(last_event[len(b"data: "):])["error"]["code"] == "backend_failed"
        assert headers["x-specroute-backend"] == "mtp-0"
    assert all(a[1]["x-specroute-backend"] == "plain-0" for a in answers[32:])  # after the kill
    assert 1 <= cut <= 16  # only streams that mtp-0 had started could be cut, and some were
    records = await stack.logged(len(answers))
    assert len(records) == len(answers)
    assert sum(1 for r in records if "stream broke" in r.outcome.error) == cut


async def test_a_log_directory_that_goes_away_costs_lines_then_recovers(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    # rotate at ~1 KB: every record rotates, so every write needs the directory
    stack = await start_stack(aiohttp_server, tmp_path, log_path=str(log_dir / "d.jsonl"),
                              log_rotate_mb=0.001)
    async with stack.client() as client:
        await client.chat.completions.create(**_chat(0, stream=False))  # type: ignore[call-overload]
        await stack.logged(1)
        shutil.rmtree(log_dir)
        log_dir.write_text("a file where the log's directory was")  # unwritable: not a directory
        for i in range(3):
            reply = await client.chat.completions.create(**_chat(1 + i, stream=False))  # type: ignore[call-overload]
            assert reply.choices[0].message.content
        await stack.logged(4)
        health = await _sinks(stack)
        assert health["decision_log"]["failures"] == 3 and not health["decision_log"]["ok"]
        log_dir.unlink()  # the operator fixes it: the next record is written again
        await client.chat.completions.create(**_chat(9, stream=False))  # type: ignore[call-overload]
        await stack.logged(5)
    assert (await _sinks(stack))["decision_log"]["ok"]
    lines = (log_dir / "d.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["request_id"] == stack.last.request_id


async def _sinks(stack: Stack) -> dict[str, dict[str, object]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{stack.proxy.port}/readyz") as response,
    ):
        return dict((await response.json())["record_sinks"])


async def test_records_batched_over_the_serving_interval_are_all_logged_in_order(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    from router.state import Deps

    stack = await start_stack(aiohttp_server, tmp_path,
                              record_interval_s=Deps().record_interval_s)
    async with stack.client() as client:
        ids = []
        for i in range(6):
            raw = await client.chat.completions.with_raw_response.create(  # type: ignore[call-overload]
                **_chat(i, stream=i % 2 == 0))
            ids.append(raw.headers["x-specroute-request-id"])
            if i % 2 == 0:
                async for _ in raw.parse():
                    pass
    records = await stack.logged(6)
    assert [r.request_id for r in records] == ids
    lines = Path(stack.config.log.path).read_text().splitlines()
    assert [json.loads(line)["request_id"] for line in lines] == ids
