"""The running app: /metrics, and hot reload of the policy (a bad file never replaces a good one)."""

from __future__ import annotations

import shutil
from pathlib import Path

import aiohttp

from router.app import reload_once
from tests.router.conftest import ServerFactory, gb10_policy, start_stack
from tests.router.test_proxy_openai import GREEDY_TECH

_calls = 0


async def _route(base_url: str) -> str:
    """The profile a fresh conversation is routed to (a new key each call: no stickiness)."""
    global _calls
    _calls += 1
    headers = {"x-specroute-conversation": f"conv-{_calls}"}
    async with aiohttp.ClientSession() as session, session.post(
        f"{base_url}/chat/completions", json=GREEDY_TECH, headers=headers
    ) as response:
        assert response.status == 200
        return response.headers["x-specroute-profile"]


async def _metrics(port: int) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        assert response.status == 200
        assert response.content_type == "text/plain"
        return await response.text()


async def test_policy_edits_are_hot_reloaded_and_bad_ones_rejected(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    shutil.copy(gb10_policy(tmp_path), policy)
    text = policy.read_text()
    policy.write_text(text + "\n")  # the default routes technical to mtp (auto: route model)
    stack = await start_stack(aiohttp_server, tmp_path, policy=str(policy))
    app = stack.proxy.app
    assert await _route(stack.base_url) == "mtp"

    pinned = text.replace("technical: auto", "technical: plain")
    assert pinned != text
    policy.write_text(pinned)
    reload_once(app)
    assert await _route(stack.base_url) == "plain"

    policy.write_text(pinned.replace("technical: plain", "technical: turbo"))
    reload_once(app)
    assert await _route(stack.base_url) == "plain"  # the last good policy stays in force
    metrics = await _metrics(stack.proxy.port)
    assert 'specroute_policy_reloads_total{result="failed"} 1.0' in metrics
    assert 'specroute_policy_reloads_total{result="ok"} 1.0' in metrics


async def test_metrics_count_requests(aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    stack = await start_stack(aiohttp_server, tmp_path)
    await _route(stack.base_url)
    await _route(stack.base_url)
    metrics = await _metrics(stack.proxy.port)
    lines = [line for line in metrics.splitlines() if line.startswith("specroute_requests_total{")]
    assert lines and sum(float(line.rsplit(" ", 1)[1]) for line in lines) == 2.0


async def test_a_conversation_stays_where_its_prefix_is(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    stack = await start_stack(aiohttp_server, tmp_path)
    # ~3,000 prompt tokens: re-prefilling them elsewhere costs more than +4.4% on 32 tokens
    long_tech = {**GREEDY_TECH, "max_tokens": 32, "messages": [
        {"role": "system", "content": "You explain systems. " * 600},
        *GREEDY_TECH["messages"]]}
    async with aiohttp.ClientSession() as session:
        url = f"{stack.base_url}/chat/completions"
        async with session.post(url, json=long_tech, headers={
                "x-specroute-conversation": "one", "x-specroute-route": "plain"}) as response:
            assert response.headers["x-specroute-backend"] == "plain-0"
        async with session.post(url, json=long_tech,
                                headers={"x-specroute-conversation": "one"}) as response:
            assert response.headers["x-specroute-backend"] == "plain-0"
            assert response.headers["x-specroute-reason"] == "finish"
        async with session.post(url, json=long_tech,
                                headers={"x-specroute-conversation": "two"}) as response:
            assert response.headers["x-specroute-backend"] == "mtp-0"  # nothing cached anywhere
    first, second = stack.sink.records[-3:-1]
    assert second.decision["finish_ms"]["plain-0"] < second.decision["finish_ms"]["mtp-0"]
    assert first.conversation == second.conversation
