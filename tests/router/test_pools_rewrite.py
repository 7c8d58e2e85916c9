"""Named pools and request rewrites through the proxy: the ds4 set-up of the GB10 write-up.

Two fake ds4 instances (real aiohttp servers on loopback) record the exact bytes they receive
and answer with bytes of their own layout; the proxy runs the shipped policies/ds4-gb10.yaml
with the `nothink` pool, and the real openai SDK talks to it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backends.spec import BackendSpec
from decisionlog.records import parse_line, to_json
from router.app import create_app, reload_once
from router.config import Config, Limits, LogConfig, SupervisorConfig
from router.learning.online import ONLINE
from router.learning.relearn import LEARNER
from router.state import Deps
from tests.router.conftest import ListSink, ServerFactory

ROOT = Path(__file__).resolve().parents[2]
DS4_POLICY = ROOT / "policies" / "ds4-gb10.yaml"

CASUAL = {"model": "deepseek-v4-flash",
          "messages": [{"role": "user", "content": "hey! how's your day going?"}]}
# Greedy and non-thinking: what MTP-1 speeds up. Odd spacing: the bytes must pass unchanged.
CODE_BYTES = (
    b'{"model":"deepseek-v4-flash",  "temperature":0, "thinking":{"type":"disabled"},'
    b'"messages":[{"role":"user","content":"Write a Python function that reverses a list."}]}'
)


@dataclass
class FakeDs4:
    """One ds4-server as the proxy sees it: what it got, what it answered."""

    name: str
    received: list[bytes] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)

    def last_body(self) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.received[-1])
        return body


def _reply(state: FakeDs4, body: dict[str, Any]) -> bytes:
    thinking = body.get("thinking")
    mode = thinking.get("type") if isinstance(thinking, dict) else "default"
    text = f"{state.name} says hi ({body.get('model')}, thinking {mode})"
    n, model, words = len(state.received), body.get("model"), len(text.split())
    # a layout json.dumps would not write: relaying must keep it
    return (
        f'{{ "id" : "chatcmpl-{n}","object":"chat.completion" ,"created":0,"model":"{model}",'
        f'"choices":[{{"index":0,"message":{{"role":"assistant","content":"{text}"}},'
        f'"finish_reason":"stop"}}],"usage":{{"prompt_tokens":9,"completion_tokens":{words},'
        f'"total_tokens":{9 + words}}}}}'
    ).encode()


def _stream(state: FakeDs4, body: dict[str, Any]) -> bytes:
    words = _reply_words(state, body)
    events = [b": prefill\n\n"]
    for word in words:
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                 "model": body.get("model"),
                 "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
        events.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return b"".join(events)


def _reply_words(state: FakeDs4, body: dict[str, Any]) -> list[str]:
    return f"{state.name} streams to {body.get('model')}".split()


def fake_ds4_app(state: FakeDs4) -> web.Application:
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "deepseek-v4-flash"}]})

    async def generate(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        state.received.append(raw)
        body = json.loads(raw)
        if body.get("stream"):
            payload = _stream(state, body)
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(payload)
            await response.write_eof()
            state.sent.append(payload)
            return response
        payload = _reply(state, body)
        state.sent.append(payload)
        return web.Response(body=payload, content_type="application/json")

    app = web.Application()
    app.router.add_get("/v1/models", models)
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"):
        app.router.add_post(path, generate)
    return app


@dataclass
class Ds4Stack:
    proxy: TestServer
    mtp: FakeDs4
    plain: FakeDs4
    sink: ListSink
    policy: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.proxy.port}/v1"

    def client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key="sk-test", max_retries=0, **kwargs)

    @property
    def last(self) -> Any:
        assert self.sink.records, "no record was logged"
        return self.sink.records[-1]


@pytest.fixture
async def ds4(aiohttp_server: ServerFactory, tmp_path: Path) -> AsyncIterator[Ds4Stack]:
    yield await start_ds4(aiohttp_server, tmp_path)


async def start_ds4(
    aiohttp_server: ServerFactory, tmp_path: Path, *, policy_text: str | None = None,
    draws: list[float] | None = None,
) -> Ds4Stack:
    """The proxy with the ds4 policy (or `policy_text`) in front of two fake ds4 servers;
    `draws`: the exploration draws, in turn (None: no exploration)."""
    mtp, plain = FakeDs4("ds4-mtp"), FakeDs4("ds4-plain")
    mtp_server = await aiohttp_server(fake_ds4_app(mtp))
    plain_server = await aiohttp_server(fake_ds4_app(plain))
    policy = tmp_path / "ds4-gb10.yaml"
    policy.write_text(policy_text or DS4_POLICY.read_text(encoding="utf-8"), encoding="utf-8")
    config = Config(
        backends=[
            BackendSpec(name="ds4-mtp", engine="ds4", profile="mtp",
                        url=f"http://127.0.0.1:{mtp_server.port}"),
            BackendSpec(name="ds4-plain", engine="ds4", profile="plain",
                        url=f"http://127.0.0.1:{plain_server.port}"),
        ],
        pools={"nothink": ["ds4-plain"]},
        default_backend="ds4-plain",
        policy=str(policy),
        classifier="rules",
        tokenizer=False,
        log=LogConfig(path=str(tmp_path / "decisions.jsonl")),
        limits=Limits(connect_timeout_s=2.0),
        supervisor=SupervisorConfig(log_dir=str(tmp_path / "backends"), startup_probe=False),
    )
    sink = ListSink()
    turns = iter(draws or [])
    deps = Deps(sinks=(sink,), explore=draws is not None, random=lambda: next(turns),
                record_interval_s=0.0)
    proxy = await aiohttp_server(create_app(config, deps=deps))
    return Ds4Stack(proxy, mtp, plain, sink, policy)


async def _post(url: str, data: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as session, session.post(
        url, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    ) as response:
        return response.status, dict(response.headers), await response.read()


async def test_casual_chat_goes_to_the_non_thinking_pool_as_deepseek_chat(ds4: Ds4Stack) -> None:
    async with ds4.client() as client:
        raw = await client.chat.completions.with_raw_response.create(**CASUAL)  # type: ignore[call-overload]
    reply = raw.parse()
    assert raw.headers["x-specroute-backend"] == "ds4-plain"
    assert raw.headers["x-specroute-pool"] == "nothink"
    assert raw.headers["x-specroute-rewrite"] == "model=deepseek-chat,thinking=off"
    assert raw.headers["x-specroute-class"] == "chat"
    sent = ds4.plain.last_body()
    assert sent["model"] == "deepseek-chat"
    assert sent["thinking"] == {"type": "disabled"}
    assert sent["messages"] == CASUAL["messages"]
    assert ds4.mtp.received == []
    assert reply.choices[0].message.content == "ds4-plain says hi (deepseek-chat, thinking disabled)"
    record = ds4.last
    assert record.decision["pool"] == "nothink"
    assert record.decision["arm"] == "nothink+model=deepseek-chat,thinking=off"
    assert record.decision["profile"] == "plain"
    assert record.rewrite["changes"] == {"model": "deepseek-chat", "thinking": False}
    assert record.rewrite["before"] == {"model": "deepseek-v4-flash", "thinking": None}
    assert record.rewrite["paths"] == ["model", "thinking.type"]
    assert record.model == "deepseek-v4-flash"  # the record keeps what the client asked


async def test_the_rewritten_response_is_relayed_byte_for_byte(ds4: Ds4Stack) -> None:
    status, headers, body = await _post(f"{ds4.base_url}/chat/completions", json.dumps(CASUAL).encode())
    assert status == 200
    assert body == ds4.plain.sent[-1]
    assert headers["x-specroute-rewrite"] == "model=deepseek-chat,thinking=off"


async def test_a_code_turn_goes_unchanged_to_mtp(ds4: Ds4Stack) -> None:
    status, headers, body = await _post(f"{ds4.base_url}/chat/completions", CODE_BYTES)
    assert status == 200
    assert headers["x-specroute-backend"] == "ds4-mtp"
    assert headers["x-specroute-pool"] == "mtp"
    assert headers["x-specroute-rewrite"] == "none"
    assert ds4.mtp.received == [CODE_BYTES]  # not re-encoded: the client's bytes
    assert body == ds4.mtp.sent[-1]
    record = ds4.last
    assert record.rewrite is None and record.decision["arm"] == "mtp"
    line = to_json(record)
    assert '"rewrite"' not in line and parse_line(line) == record


async def test_the_header_override_wins_and_nothing_is_rewritten(ds4: Ds4Stack) -> None:
    raw = json.dumps(CASUAL).encode()
    status, headers, _ = await _post(f"{ds4.base_url}/chat/completions", raw,
                                     {"x-specroute-route": "mtp"})
    assert status == 200
    assert headers["x-specroute-backend"] == "ds4-mtp"
    assert headers["x-specroute-reason"] == "header"
    assert headers["x-specroute-rewrite"] == "none"
    assert ds4.mtp.received == [raw]
    assert ds4.last.rewrite is None


async def test_a_pinned_model_alias_wins_over_the_chat_route(ds4: Ds4Stack) -> None:
    async with ds4.client() as client:
        raw = await client.chat.completions.with_raw_response.create(
            **{**CASUAL, "model": "deepseek-reasoner"}  # type: ignore[call-overload]
        )
    assert raw.headers["x-specroute-reason"] == "model"
    assert raw.headers["x-specroute-rewrite"] == "none"
    sent = ds4.plain.last_body()
    assert sent["model"] == "deepseek-reasoner" and "thinking" not in sent


async def test_a_pinned_class_route_is_not_rewritten(ds4: Ds4Stack) -> None:
    prose = {"model": "deepseek-v4-flash", "temperature": 0, "thinking": {"type": "disabled"},
             "messages": [{"role": "user", "content": "Write a short story about a lighthouse "
                                                      "keeper who befriends a storm."}]}
    status, headers, _ = await _post(f"{ds4.base_url}/chat/completions", json.dumps(prose).encode())
    assert status == 200
    assert headers["x-specroute-class"] == "prose"
    assert headers["x-specroute-pool"] == "plain" and headers["x-specroute-rewrite"] == "none"
    assert ds4.plain.last_body()["model"] == "deepseek-v4-flash"


async def test_a_streamed_casual_chat_is_rewritten_and_relayed_as_sent(ds4: Ds4Stack) -> None:
    async with ds4.client() as client:
        stream = await client.chat.completions.create(**CASUAL, stream=True)  # type: ignore[call-overload]
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text.split() == ["ds4-plain", "streams", "to", "deepseek-chat"]
    sent = ds4.plain.last_body()
    assert sent["model"] == "deepseek-chat" and sent["thinking"] == {"type": "disabled"}
    assert sent["stream_options"] == {"include_usage": True}  # the proxy's own ask, as before
    status, _, body = await _post(f"{ds4.base_url}/chat/completions",
                                  json.dumps({**CASUAL, "stream": True}).encode())
    assert status == 200 and body == ds4.plain.sent[-1]


async def test_anthropic_messages_get_thinking_in_their_own_field(ds4: Ds4Stack) -> None:
    body = {"model": "deepseek-v4-flash", "max_tokens": 64,
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": [{"role": "user", "content": "hey! how's your day going?"}]}
    status, headers, _ = await _post(f"{ds4.base_url}/messages", json.dumps(body).encode())
    assert status == 200
    assert headers["x-specroute-pool"] == "nothink"
    sent = ds4.plain.last_body()
    assert sent["thinking"] == {"type": "disabled"} and sent["model"] == "deepseek-chat"
    assert ds4.last.rewrite["before"]["thinking"] is True


async def test_completions_are_outside_the_chat_route(ds4: Ds4Stack) -> None:
    raw = b'{"model": "deepseek-v4-flash", "prompt": "hey! how is your day going?", "temperature": 0}'
    status, headers, _ = await _post(f"{ds4.base_url}/completions", raw)
    assert status == 200
    assert headers["x-specroute-rewrite"] == "none"
    assert headers["x-specroute-pool"] in ("mtp", "plain")
    assert (ds4.mtp.received + ds4.plain.received) == [raw]


async def test_a_reload_naming_a_pool_the_config_lacks_keeps_the_good_policy(ds4: Ds4Stack) -> None:
    text = ds4.policy.read_text(encoding="utf-8")
    ds4.policy.write_text(text.replace("pool: nothink", "pool: nothink2"), encoding="utf-8")
    reload_once(ds4.proxy.app)
    status, headers, _ = await _post(f"{ds4.base_url}/chat/completions", json.dumps(CASUAL).encode())
    assert status == 200 and headers["x-specroute-pool"] == "nothink"
    ds4.policy.write_text(text.replace("prose: plain", "prose: nothink"), encoding="utf-8")
    reload_once(ds4.proxy.app)
    prose = {"model": "deepseek-v4-flash", "temperature": 0,
             "messages": [{"role": "user", "content": "Write a short story about a lighthouse "
                                                      "keeper who befriends a storm."}]}
    status, headers, _ = await _post(f"{ds4.base_url}/chat/completions", json.dumps(prose).encode())
    assert status == 200 and headers["x-specroute-pool"] == "nothink"
    assert headers["x-specroute-rewrite"] == "none"  # a pool route with no rewrite


async def test_the_header_may_name_a_pool_and_nothing_is_rewritten(ds4: Ds4Stack) -> None:
    raw = CODE_BYTES
    status, headers, _ = await _post(f"{ds4.base_url}/chat/completions", raw,
                                     {"x-specroute-route": "NoThink"})
    assert status == 200
    assert (headers["x-specroute-backend"], headers["x-specroute-pool"]) == ("ds4-plain", "nothink")
    assert headers["x-specroute-reason"] == "header" and headers["x-specroute-rewrite"] == "none"
    assert ds4.plain.received == [raw]
    status, _, body = await _post(f"{ds4.base_url}/chat/completions", raw,
                                  {"x-specroute-route": "elsewhere"})
    assert status == 400
    assert "mtp, plain, auto, nothink" in json.loads(body)["error"]["message"]


async def test_a_route_s_arms_are_explored_within_the_route_and_learned(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    chat = ("  chat:\n    pool: nothink\n    endpoints: [chat, messages, responses]\n"
            "    rewrite: {model: deepseek-chat, thinking: false}\n")
    arms = ("  chat:\n    endpoints: [chat, messages, responses]\n    arms:\n      - plain\n"
            "      - {pool: nothink, rewrite: {model: deepseek-chat, thinking: false}}\n")
    text = DS4_POLICY.read_text(encoding="utf-8")
    assert chat in text
    draws = [0.1, 0.9, 0.3, 0.7, 0.2, 0.8]  # cold start: below 0.5 explores the other arm
    stack = await start_ds4(aiohttp_server, tmp_path, policy_text=text.replace(chat, arms),
                            draws=draws)
    seen = []
    for i, _ in enumerate(draws):
        headers = {"x-specroute-conversation": f"c{i}"}
        async with stack.client(default_headers=headers) as client:
            raw = await client.chat.completions.with_raw_response.create(**CASUAL)  # type: ignore[call-overload]
        seen.append(raw.headers["x-specroute-rewrite"])
    assert seen == ["model=deepseek-chat,thinking=off", "none"] * 3
    arm = "nothink+model=deepseek-chat,thinking=off"
    assert [r.decision["arm"] for r in stack.sink.records] == [arm, "plain"] * 3
    assert [r.decision["explored"] for r in stack.sink.records] == [True, False] * 3
    assert stack.mtp.received == []  # never outside the route's arms
    # learned online, record by record, before any learning run
    stats = stack.proxy.app[ONLINE].arms.stats["chat/en"]
    assert (stats[arm].n, stats["plain"].n) == (3, 3)
    # the learning run's one pass writes them into the one learned state; nothing is counted
    # twice once it is in force
    state = stack.proxy.app[LEARNER].learn_now(datetime(2026, 1, 1, tzinfo=UTC))
    assert state.arms.stats["chat/en"][arm].n == 3
    reload_once(stack.proxy.app)
    after = stack.proxy.app[ONLINE].arms.stats["chat/en"]
    assert (after[arm].n, after["plain"].n) == (3, 3)
    assert not (tmp_path / "ds4-gb10.arms.json").exists()


def _as_logged(record: Any) -> dict[str, Any]:
    """`dataclasses.asdict(record)` as JSON would carry it, without the optional members a
    line leaves out when they are empty."""
    data: dict[str, Any] = json.loads(json.dumps(asdict(record), default=str))
    del data["inputs"]  # the priced inputs live in memory only, never in a line
    for name in ("content", "rewrite"):
        if data[name] is None:
            del data[name]
    if not data["extra"]:
        del data["extra"]
    return data


async def test_the_hand_built_log_line_is_asdict_of_the_record(ds4: Ds4Stack) -> None:
    """The line is built field by field for speed; it must carry every field of the record
    (the rewrite, the pool and arm, the finish rule's keys), so it never drifts from it."""
    for body in (json.dumps(CASUAL).encode(), CODE_BYTES):  # rewritten, then not
        status, _, _ = await _post(f"{ds4.base_url}/chat/completions", body)
        assert status == 200
        record = ds4.last
        assert json.loads(to_json(record)) == _as_logged(record)
    assert ds4.sink.records[0].rewrite is not None and ds4.sink.records[1].rewrite is None
    assert {"pool", "arm"} <= set(ds4.sink.records[0].decision)


async def test_a_rewritten_stream_keeps_surrogates_and_numbers_as_the_client_wrote_them(
    ds4: Ds4Stack,
) -> None:
    """Rewrite and include_usage together: the body is encoded once from the client's own
    numbers; a lone surrogate (valid JSON, not UTF-8) goes on escaped and never fails."""
    raw = (b'{"model":"deepseek-v4-flash","stream":true,"seed":123456789012345678901234567,'
           b'"messages":[{"role":"user","content":"hey! how\'s your day going? \\ud800"}]}')
    status, headers, body = await _post(f"{ds4.base_url}/chat/completions", raw)
    assert status == 200, body
    assert headers["x-specroute-rewrite"] == "model=deepseek-chat,thinking=off"
    assert body == ds4.plain.sent[-1]  # the usage chunk asked for is not in the fake's stream
    received = ds4.plain.received[-1]
    assert b"123456789012345678901234567" in received
    sent = json.loads(received)
    assert sent["model"] == "deepseek-chat" and sent["thinking"] == {"type": "disabled"}
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["messages"][0]["content"].endswith("\ud800")
    assert json.loads(to_json(ds4.last))["rewrite"]["paths"] == ["model", "thinking.type"]
