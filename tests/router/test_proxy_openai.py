"""The proxy through the real openai SDK: routing, byte-for-byte relay, models, passthrough."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import openai

from decisionlog.records import parse_line, to_json
from tests.router.conftest import ServerFactory, Stack, start_stack

GREEDY_TECH = {
    "model": "sim-model",
    "messages": [{"role": "user", "content": "Explain how a B-tree keeps itself balanced."}],
    "temperature": 0,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


async def _post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers or {}) as response,
    ):
        return response.status, dict(response.headers), await response.read()


async def test_chat_is_routed_by_policy_and_relayed_byte_for_byte(stack: Stack) -> None:
    direct = await _post(f"http://127.0.0.1:{stack.mtp_server.port}/v1/chat/completions", GREEDY_TECH)
    status, headers, body = await _post(f"{stack.base_url}/chat/completions", GREEDY_TECH)
    assert status == 200
    assert body == direct[2]
    assert headers["x-specroute-backend"] == "mtp-0"
    assert headers["x-specroute-class"] == "technical"
    assert float(headers["x-specroute-overhead-ms"]) >= 0


async def test_sdk_chat_non_stream(stack: Stack) -> None:
    async with stack.client() as client:
        reply = await client.chat.completions.create(**GREEDY_TECH)
    assert reply.choices[0].message.content
    record = stack.last
    assert record.decision["backend"] == "mtp-0"
    assert record.outcome.draft_n is not None and record.outcome.draft_n > 0
    assert record.outcome.spec_source == "timings"
    assert record.outcome.completion_tokens == len(reply.choices[0].message.content.split())


async def test_sdk_chat_stream_matches_direct_bytes_and_is_read_from_llamacpp_timings(
        stack: Stack) -> None:
    body = {**GREEDY_TECH, "stream": True}
    direct = await _post(f"http://127.0.0.1:{stack.mtp_server.port}/v1/chat/completions", body)
    proxied = await _post(f"{stack.base_url}/chat/completions", body)
    assert proxied[2] == direct[2]
    assert b": prefill" in proxied[2]  # comment lines are kept
    assert b'"timings"' in proxied[2]  # llama.cpp's own, on its last chunk, as direct
    sent = stack.mtp.received[-1]["body"]
    assert "stream_options" not in sent  # its timings say what usage would: nothing asked
    async with stack.client() as client:
        stream = await client.chat.completions.create(**body)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text.strip()
    record = stack.last
    assert record.stream is True
    assert record.outcome.completion_tokens == len(text.split())
    assert record.outcome.ttft_ms is not None


async def test_an_engine_asked_for_usage_has_it_stripped_before_the_client(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    stack = await start_stack(aiohttp_server, tmp_path, engine="vllm")
    body = {**GREEDY_TECH, "stream": True}
    direct = await _post(f"http://127.0.0.1:{stack.mtp_server.port}/v1/chat/completions", body)
    proxied = await _post(f"{stack.base_url}/chat/completions", body)
    assert proxied[2] == direct[2]
    assert b'"usage"' not in proxied[2]  # the usage chunk the proxy asked for is not shown
    assert stack.mtp.received[-1]["body"]["stream_options"] == {"include_usage": True}
    record = (await stack.logged(1))[-1]
    assert record.outcome.prompt_tokens is not None and record.outcome.completion_tokens


async def test_client_asking_for_usage_gets_it(stack: Stack) -> None:
    body = {**GREEDY_TECH, "stream": True, "stream_options": {"include_usage": True}}
    async with stack.client() as client:
        stream = await client.chat.completions.create(**body)
        usage = [c.usage async for c in stream if c.usage is not None]
    assert len(usage) == 1 and usage[0].completion_tokens > 0


async def test_sampled_request_goes_plain(stack: Stack) -> None:
    # the GB10 prior: a sampled request gains nothing on mtp; a tie goes to plain
    async with stack.client() as client:
        raw = await client.chat.completions.with_raw_response.create(
            **{**GREEDY_TECH, "temperature": 0.7}
        )
    assert raw.headers["x-specroute-backend"] == "plain-0"
    assert raw.headers["x-specroute-reason"] == "finish"


async def test_header_overrides_route(stack: Stack) -> None:
    async with stack.client(default_headers={"x-specroute-route": "plain"}) as client:
        raw = await client.chat.completions.with_raw_response.create(**GREEDY_TECH)
    assert raw.headers["x-specroute-backend"] == "plain-0"
    assert raw.headers["x-specroute-reason"] == "header"


async def test_bad_route_header_is_a_400(stack: Stack) -> None:
    status, _, body = await _post(
        f"{stack.base_url}/chat/completions", GREEDY_TECH, {"x-specroute-route": "fast"}
    )
    assert status == 400
    assert json.loads(body)["error"]["param"] == "x-specroute-route"


async def test_tool_call_request_is_agent_and_speculates(stack: Stack) -> None:
    async with stack.client() as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="sim-model", temperature=0, tools=TOOLS,
            messages=[{"role": "user", "content": "What's the weather in Lisbon?"}],
        )
    assert raw.headers["x-specroute-class"] == "agent"
    assert raw.headers["x-specroute-backend"] == "mtp-0"
    assert stack.last.features["n_tools"] == 1


async def test_completions_endpoint(stack: Stack) -> None:
    async with stack.client() as client:
        reply = await client.completions.create(
            model="sim-model", prompt="def fibonacci(n):", temperature=0, max_tokens=8
        )
    assert reply.choices[0].text
    assert stack.last.endpoint == "completions"
    assert stack.last.classifier["class"] == "code"


async def test_models_are_merged_without_duplicates(stack: Stack) -> None:
    stack.plain.model = "sim-model"  # same id on both: listed once
    async with stack.client() as client:
        models = await client.models.list()
    assert [m.id for m in models.data] == ["sim-model"]
    stack.plain.model = "other-model"
    async with stack.client() as client:
        models = await client.models.list()
    assert sorted(m.id for m in models.data) == ["other-model", "sim-model"]


async def test_unknown_v1_path_passes_through_to_default_backend(stack: Stack) -> None:
    async with stack.client() as client:
        embedding = await client.embeddings.create(model="sim-model", input="hello")
    assert len(embedding.data[0].embedding) == 8
    assert [r["path"] for r in stack.plain.received] == ["/v1/embeddings"]
    assert stack.mtp.received == []  # the default backend (plain-0) answered


async def test_messages_and_responses_are_classified_and_routed(stack: Stack) -> None:
    # the chat first: routed by the prior alone (an answer teaches the route model its pace,
    # and the simulated engines answer at once: one learned from would look very fast)
    responses = {"model": "sim-model", "input": "Hi there!", "temperature": 0}
    status, headers, _ = await _post(f"{stack.base_url}/responses", responses)
    assert status == 200 and headers["x-specroute-class"] == "chat"
    assert headers["x-specroute-backend"] == "plain-0"
    assert stack.last.endpoint == "responses"
    messages = {
        "model": "sim-model", "max_tokens": 16, "temperature": 0,
        "system": "You are a coding agent.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Write a Python function that reverses a list."}]}],
    }
    status, headers, _ = await _post(f"{stack.base_url}/messages", messages)
    assert status == 200 and headers["x-specroute-class"] == "code"
    assert stack.last.endpoint == "messages"


async def test_log_line_has_the_schema_and_no_prompt_text(stack: Stack) -> None:
    secret = "the-secret-phrase-42"
    body = {**GREEDY_TECH, "messages": [{"role": "user", "content": f"Explain {secret} please."}]}
    await _post(f"{stack.base_url}/chat/completions", body)
    line = to_json(stack.last)
    assert secret not in line
    data = json.loads(line)
    assert data["schema_version"] == 1
    assert set(data) >= {"ts", "request_id", "endpoint", "model", "stream", "conversation",
                         "features", "classifier", "decision", "outcome", "overhead_ms"}
    assert set(data["decision"]) == {"profile", "backend", "reason", "rule", "explored",
                                     "service_ms", "queue_ms", "tokens", "tokens_sd", "speedup",
                                     "speedup_sd",
                                     "p_spec",
                                     "finish_ms", "pool", "arm", "config", "speedups",
                                     "pace_ms", "batch"}
    assert set(data["decision"]["finish_ms"]) == {"mtp-0", "plain-0"}
    assert "rewrite" not in data  # no rewrite: the request went upstream as sent
    assert parse_line(line) == stack.last
    lines = Path(stack.config.log.path).read_text(encoding="utf-8").splitlines()
    assert lines and json.loads(lines[-1])["request_id"] == stack.last.request_id
    assert secret not in "\n".join(lines)


async def test_sdk_errors_surface_as_openai_errors(stack: Stack) -> None:
    async with stack.client() as client:
        try:
            await client.chat.completions.create(model="sim-model", messages=[])
        except openai.BadRequestError as exc:
            assert "messages" in str(exc)
        else:
            raise AssertionError("an empty messages array must be rejected")
