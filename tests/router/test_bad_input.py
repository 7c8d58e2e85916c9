"""Bad input gets the right 4xx with an OpenAI-style error body: never a trace, never a hang."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.router.conftest import ServerFactory, Stack, start_stack

CASES = [
    ("/chat/completions", b"{not json", 400, "invalid_json"),
    ("/chat/completions", b"", 400, "empty_body"),
    ("/chat/completions", b"[1, 2, 3]", 400, "invalid_body"),
    ("/chat/completions", b'"a string"', 400, "invalid_body"),
    ("/chat/completions", b'{"model": "m"}', 400, "invalid_request"),
    ("/chat/completions", b'{"model": "m", "messages": "hi"}', 400, "invalid_request"),
    ("/chat/completions", b'{"messages": [{"content": "no role"}]}', 400, "invalid_request"),
    ("/chat/completions", b'{"messages": [42]}', 400, "invalid_request"),
    ("/completions", b'{"model": "m"}', 400, "invalid_request"),
    ("/completions", b'{"prompt": {"a": 1}}', 400, "invalid_request"),
    ("/messages", b'{"max_tokens": 5}', 400, "invalid_request"),
    ("/responses", b'{"input": 7}', 400, "invalid_request"),
    ("/chat/completions", b"\xff\xfe\x00garbage", 400, "invalid_json"),
]


@pytest.mark.parametrize(("path", "raw", "status", "code"), CASES)
async def test_bad_bodies(stack: Stack, path: str, raw: bytes, status: int, code: str) -> None:
    async with aiohttp.ClientSession() as session, session.post(
        stack.base_url + path, data=raw, headers={"Content-Type": "application/json"}
    ) as response:
        assert response.status == status
        assert response.content_type == "application/json"
        error = (await response.json())["error"]
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"
    assert error["message"]
    assert "Traceback" not in error["message"]
    assert stack.mtp.received == [] and stack.plain.received == []  # nothing was forwarded


async def test_body_over_the_limit_is_a_413(aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    stack = await start_stack(aiohttp_server, tmp_path, max_body_mb=0.01)  # ~10 KB
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 20_000}]}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stack.base_url}/chat/completions", json=big) as response,
    ):
        assert response.status == 413
        error = (await response.json())["error"]
    assert error["code"] == "body_too_large"
    assert stack.mtp.received == [] and stack.plain.received == []


async def test_agent_sized_body_is_accepted(stack: Stack) -> None:
    # Agent requests are often 30-300 KB; the default limit is 32 MiB.
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "d" * 2000,
              "parameters": {"type": "object", "properties": {}}}} for i in range(100)]
    body = {"model": "m", "temperature": 0, "tools": tools,
            "messages": [{"role": "user", "content": "Open the file and fix the bug."}]}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stack.base_url}/chat/completions", json=body) as response,
    ):
        assert response.status == 200
    assert stack.last.features["n_tools"] == 100


async def test_unknown_path_is_a_json_404(stack: Stack) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{stack.proxy.port}/nope") as response,
    ):
        assert response.status == 404
        error = (await response.json())["error"]
    assert "/nope" in error["message"]


async def test_wrong_method_on_health_is_a_json_405(stack: Stack) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{stack.proxy.port}/healthz") as response,
    ):
        assert response.status == 405
        assert (await response.json())["error"]["type"] == "invalid_request_error"
