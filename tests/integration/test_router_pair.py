"""The router in front of the real SmolLM2 pair: acceptance in the log, failover while a killed
instance is restarted by the supervisor, the same bytes from both profiles through the proxy."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backends.spec import BackendSpec
from policies.learner.observation import observation_from_record
from router.app import create_app
from router.config import Config, Limits, LogConfig, SupervisorConfig
from router.state import Deps
from tests.integration.conftest import Pair
from tests.router.conftest import ListSink

pytestmark = pytest.mark.integration
ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


@dataclass
class Routed:
    pair: Pair
    records: ListSink
    client: openai.AsyncOpenAI
    clock_offset: list[float]  # moves the router's clock past its retry-after window


@pytest.fixture
async def routed(pair: Pair, aiohttp_server: ServerFactory, tmp_path: Path
                 ) -> AsyncIterator[Routed]:
    # The router attaches to the instances the supervisor runs (by URL).
    specs = [BackendSpec(name=spec.name, engine="llamacpp", profile=spec.profile,
                         url=spec.base_url) for spec in (pair.mtp, pair.plain)]
    # The router's own health checks wait a minute: a test that kills an instance sees the
    # failover of the request that finds it gone, not a periodic probe that got there first
    # (the startup probe's timed generations make when that probe falls vary with the load).
    config = Config(backends=specs, default_backend=pair.plain.name, tokenizer=False,
                    log=LogConfig(path=str(tmp_path / "decisions.jsonl")),
                    limits=Limits(connect_timeout_s=2.0),
                    supervisor=SupervisorConfig(log_dir=str(tmp_path / "router-backends"),
                                                health_interval_s=60.0))
    records = ListSink()
    offset = [0.0]
    deps = Deps(sinks=(records,), explore=False, clock=lambda: time.monotonic() + offset[0],
                record_interval_s=0.0)
    proxy = await aiohttp_server(create_app(config, deps=deps))
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{proxy.port}/v1", api_key="sk-x",
                                max_retries=0)
    yield Routed(pair, records, client, offset)
    await client.close()


async def ask(routed: Routed, route: str, prompt: str) -> str:
    answer = await routed.client.chat.completions.create(
        model=routed.pair.model, messages=[{"role": "user", "content": prompt}], max_tokens=24,
        temperature=0, extra_body={"cache_prompt": False},
        extra_headers={"x-specroute-route": route},
    )
    return answer.choices[0].message.content or ""


async def test_acceptance_reaches_the_decision_log(routed: Routed) -> None:
    prompt = "Write a Python function that reverses a string."
    via_mtp = await ask(routed, "mtp", prompt)
    mtp_record = routed.records.records[-1].outcome
    via_plain = await ask(routed, "plain", prompt)
    plain_record = routed.records.records[-1].outcome
    assert via_mtp and via_mtp.encode() == via_plain.encode()
    assert mtp_record.backend == routed.pair.mtp.name and mtp_record.spec_source == "timings"
    assert mtp_record.draft_n and mtp_record.draft_accepted is not None
    assert plain_record.backend == routed.pair.plain.name and not plain_record.draft_n
    assert mtp_record.completion_tokens == 24 and mtp_record.prompt_tokens


async def test_streamed_request_reports_without_a_usage_chunk_to_the_client(
    routed: Routed,
) -> None:
    stream = await routed.client.chat.completions.create(
        model=routed.pair.model, messages=[{"role": "user", "content": "Name three colours."}],
        max_tokens=24, temperature=0, stream=True, extra_headers={"x-specroute-route": "mtp"},
    )
    chunks = [chunk async for chunk in stream]
    assert all(chunk.usage is None for chunk in chunks)  # the client did not ask for usage
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    outcome = routed.records.records[-1].outcome
    assert outcome.draft_n and outcome.decode_tps and outcome.ttft_ms is not None


async def test_an_answer_sent_whole_times_its_prefill_as_a_stream_does(routed: Routed) -> None:
    # The learner reads a whole answer's prefill as its time less the engine's decode: on the
    # real engine that agrees with the time to the first token of the same prompt streamed.
    prompt = "Summarise this log in one line. " + " ".join(
        f"worker {i} finished batch {i * 7} in {i % 13} s;" for i in range(90))
    body = {"model": routed.pair.model, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 24, "temperature": 0, "extra_body": {"cache_prompt": False},
            "extra_headers": {"x-specroute-route": "plain"}}
    firsts = []
    for _ in range(2):  # the second of each: the instance warm
        stream = await routed.client.chat.completions.create(**body, stream=True)
        _ = [chunk async for chunk in stream]
        streamed = routed.records.records[-1]
        await routed.client.chat.completions.create(**body)
        whole = observation_from_record(routed.records.records[-1])
        assert whole is not None and streamed.outcome.ttft_ms is not None
        assert whole.prompt_tokens - whole.cached_tokens >= 500  # a prefill worth timing
        firsts.append((streamed.outcome.ttft_ms, whole.ttft_ms))
    streamed_ms, whole_ms = firsts[-1]
    assert whole_ms is not None and 0.5 * streamed_ms <= whole_ms <= 2.0 * streamed_ms, firsts


async def test_killed_instance_fails_over_then_comes_back(routed: Routed) -> None:
    pair, name = routed.pair, routed.pair.mtp.name
    old_pid = pair.supervisor.state(name).pid
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)
    await asyncio.sleep(0)  # the port is closed as soon as the process is gone
    assert await ask(routed, "mtp", "Say hello.")  # answered by the plain instance
    failed_over = routed.records.records[-1].outcome
    assert failed_over.failover_from == (name,) and failed_over.backend == pair.plain.name

    deadline = time.monotonic() + 60
    while not (pair.supervisor.state(name).healthy
               and pair.supervisor.state(name).pid not in (None, old_pid)):
        assert time.monotonic() < deadline, pair.supervisor.state(name)
        await asyncio.sleep(0.05)
    routed.clock_offset[0] += 60  # the router retries a failed backend after retry_after_s
    assert await ask(routed, "mtp", "Say hello.")
    back = routed.records.records[-1].outcome
    assert back.backend == name and back.failover_from == () and back.draft_n
