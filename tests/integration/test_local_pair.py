"""The real SmolLM2 pair behind the supervisor: same model, same bytes, acceptance, restarts."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from backends.capability import capability_probe
from backends.engines import ADAPTERS
from backends.sse import SSESplitter, event_json
from backends.stats import counter_delta, merge, parse_prometheus, read_report
from tests.integration.conftest import Pair

pytestmark = pytest.mark.integration

PROMPTS = {
    "code": "Write a Python function that checks whether a number is prime.",
    "prose": "Describe a quiet morning in a small village.",
    "chinese": "请用中文介绍一下你自己。",
    "tool": 'Reply with JSON only: {"name": "get_weather", "arguments": {"city": "Paris"}}',
}


def chat(model: str, prompt: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 24, "temperature": 0, "cache_prompt": False, **extra}


async def post(pair: Pair, base_url: str, body: dict[str, Any],
               path: str = "/v1/chat/completions") -> dict[str, Any]:
    async with pair.session.post(base_url + path, json=body) as response:
        assert response.status == 200, await response.text()
        payload: dict[str, Any] = await response.json()
        return payload


async def stream(pair: Pair, base_url: str, body: dict[str, Any]) -> list[Any]:
    splitter = SSESplitter()
    events: list[Any] = []
    async with pair.session.post(base_url + "/v1/chat/completions", json=body) as response:
        assert response.status == 200
        async for chunk in response.content.iter_any():
            events += [event_json(raw) for raw in splitter.feed(chunk)]
    return [event for event in events if event is not None]


async def test_capability_probe_sees_one_model_and_speculation(pair: Pair) -> None:
    result = await capability_probe([pair.plain, pair.mtp], pair.session)
    assert result.ok, result.errors
    assert result.common_model == pair.model
    assert (result.drafted[pair.mtp.name] or 0) > 0
    assert not result.drafted[pair.plain.name]
    assert result.warnings == ()


async def test_profiles_return_the_same_bytes(pair: Pair) -> None:
    for name, prompt in PROMPTS.items():
        plain = await post(pair, pair.plain.base_url, chat(pair.model, prompt))
        mtp = await post(pair, pair.mtp.base_url, chat(pair.model, prompt))
        text = plain["choices"][0]["message"]["content"]
        assert text, name
        assert mtp["choices"][0]["message"]["content"].encode() == text.encode(), name


async def test_streamed_text_equals_the_non_streamed_one(pair: Pair) -> None:
    body = chat(pair.model, PROMPTS["code"])
    whole = await post(pair, pair.mtp.base_url, body)
    events = await stream(pair, pair.mtp.base_url, {**body, "stream": True})
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == whole["choices"][0]["message"]["content"]


async def test_acceptance_is_reported_by_the_mtp_instance(pair: Pair) -> None:
    adapter = ADAPTERS["llamacpp"]
    body = chat(pair.model, PROMPTS["code"], stream=True)
    tweaked = adapter.request_tweaks(body, stream=True, path="/v1/chat/completions")
    assert not tweaked.added_usage and tweaked.body == body  # the client's stream, as asked
    report = read_report({})
    events = await stream(pair, pair.mtp.base_url, tweaked.body)
    for event in events:
        report = merge(report, read_report(event))
    # the finish chunk carries the timings, with the counts usage would give
    assert events[-1]["choices"][0]["finish_reason"] and "timings" in events[-1]
    assert "usage" not in events[-1]
    content = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert report.completion_tokens is not None and report.completion_tokens >= len(content) > 0
    assert report.prompt_tokens is not None and report.prompt_tokens > 0
    assert report.spec_source == "timings"
    assert report.draft_n is not None and report.draft_n > 0
    assert report.draft_accepted is not None and 0 <= report.draft_accepted <= report.draft_n
    assert report.completion_tokens == 24 and report.prompt_tokens

    plain = read_report(await post(pair, pair.plain.base_url, chat(pair.model, PROMPTS["code"])))
    assert not plain.draft_n  # the plain instance does not draft


async def test_prometheus_deltas_match_the_timings(pair: Pair) -> None:
    counters = ADAPTERS["llamacpp"].counters
    assert counters is not None

    async def scrape() -> dict[str, float]:
        async with pair.session.get(pair.mtp.base_url + "/metrics") as response:
            assert response.status == 200
            return parse_prometheus(await response.text())

    before = await scrape()
    report = read_report(await post(pair, pair.mtp.base_url, chat(pair.model, PROMPTS["tool"])))
    delta = counter_delta(before, await scrape(), counters)
    assert (delta.draft_n, delta.draft_accepted) == (report.draft_n, report.draft_accepted)


async def test_killed_instance_is_restarted_and_serves_again(pair: Pair) -> None:
    name = pair.mtp.name
    old_pid = pair.supervisor.state(name).pid
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while not (pair.supervisor.state(name).healthy
               and pair.supervisor.state(name).pid not in (None, old_pid)):
        assert time.monotonic() < deadline, pair.supervisor.state(name)
        await asyncio.sleep(0.05)
    assert pair.supervisor.state(name).restarts == 1
    assert [(n, healthy) for n, healthy, _ in pair.changes if n == name] == [
        (name, True), (name, False), (name, True)]
    answer = await post(pair, pair.mtp.base_url, chat(pair.model, PROMPTS["prose"]))
    assert answer["choices"][0]["message"]["content"]
