"""A real stack on loopback: two simulated engines (mtp and plain) and the proxy in front."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestServer

from backends.local.redisserver import RedisServer, redis_binary, start_redis
from backends.local.simulator import SimState, create_sim_app
from backends.spec import BackendSpec
from decisionlog.records import RouteRecord
from policies.store import DEFAULT_POLICY
from router.app import create_app
from router.config import AdminConfig, Config, Limits, LogConfig, SupervisorConfig
from router.state import Deps
from tests.missing import REDIS, skip_missing

ServerFactory = Callable[..., Awaitable[TestServer]]


class ListSink:
    def __init__(self) -> None:
        self.records: list[RouteRecord] = []

    def write_record(self, record: RouteRecord) -> None:
        self.records.append(record)


async def logged(sink: ListSink, count: int = 1) -> list[RouteRecord]:
    """The records once `count` are in. A record is written after the answer's last byte went
    out (in picker mode, when Envoy's stream tells the end), so a client can hold the whole
    answer before its record exists."""
    for _ in range(100):  # bounded: 5 s
        if len(sink.records) >= count:
            break
        await asyncio.sleep(0.05)
    assert len(sink.records) >= count, f"only {len(sink.records)} records logged"
    return sink.records


@dataclass
class Stack:
    proxy: TestServer
    mtp: SimState
    plain: SimState
    sink: ListSink
    config: Config
    mtp_server: TestServer
    plain_server: TestServer
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.proxy.port}/v1"

    def client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key="sk-test", max_retries=0, **kwargs)

    async def logged(self, count: int) -> list[RouteRecord]:
        return await logged(self.sink, count)

    @property
    def last(self) -> RouteRecord:
        assert self.sink.records, "no record was logged"
        return self.sink.records[-1]


def gb10_policy(directory: Path) -> str:
    """The shipped policy with the gb10-ds4 prior (the simulated engines' machine), written to
    `directory`: routing-mechanics tests predict where a request goes from that prior alone, as
    they run without the startup probe or exploration (the learner has its own tests)."""
    path = directory / "gb10-policy.yaml"
    if not path.exists():
        path.write_text(Path(DEFAULT_POLICY).read_text(encoding="utf-8").replace(
            "prior: neutral", "prior: gb10-ds4"), encoding="utf-8")
    return str(path)


async def start_stack(
    aiohttp_server: ServerFactory,
    tmp_path: Path,
    *,
    max_body_mb: float = 32.0,
    policy: str | None = None,
    mtp: SimState | None = None,
    plain: SimState | None = None,
    health_interval_s: float = 5.0,
    engine: str = "llamacpp",
    log_content: bool = False,
    shipped_scorer: bool = False,
    admin_token: str = "",
    log_path: str | None = None,
    log_rotate_mb: float = 100.0,
    record_interval_s: float = 0.0,
    startup_probe: bool = False,
) -> Stack:
    """`shipped_scorer`: the trained artifact and the DeepSeek tokenizer, as `serve` runs them
    (default: the rules and no tokenizer, whose verdicts routing tests can predict)."""
    mtp = mtp or SimState(profile="mtp", acceptance={"technical": 0.8})
    plain = plain or SimState(profile="plain")
    mtp_server = await aiohttp_server(create_sim_app(mtp))
    plain_server = await aiohttp_server(create_sim_app(plain))
    specs = [
        BackendSpec(name="mtp-0", engine=engine, profile="mtp", url=f"http://127.0.0.1:{mtp_server.port}"),
        BackendSpec(name="plain-0", engine=engine, profile="plain", url=f"http://127.0.0.1:{plain_server.port}/v1"),
    ]
    config = Config(
        backends=specs,
        default_backend="plain-0",
        tokenizer=shipped_scorer,
        # routing mechanics under test, with a scorer whose verdicts are plain
        classifier="default" if shipped_scorer else "rules",
        admin=AdminConfig(token=admin_token),
        log=LogConfig(path=log_path or str(tmp_path / "decisions.jsonl"), content=log_content,
                      rotate_mb=log_rotate_mb),
        limits=Limits(max_body_mb=max_body_mb, connect_timeout_s=2.0),
        # health checks run (real supervisor); the start probe (off unless asked) adds records
        supervisor=SupervisorConfig(
            log_dir=str(tmp_path / "backends"), startup_probe=startup_probe,
            health_interval_s=health_interval_s,
        ),
        policy=policy or gb10_policy(tmp_path),
    )
    sink = ListSink()
    # No exploration: tests assert where requests go (exploration has its own tests). Each record
    # written as its request finishes unless asked: tests read them as soon as the answer is in.
    proxy = await aiohttp_server(create_app(config, deps=Deps(
        sinks=(sink,), explore=False, record_interval_s=record_interval_s)))
    return Stack(proxy, mtp, plain, sink, config, mtp_server, plain_server)


@pytest.fixture
async def stack(aiohttp_server: ServerFactory, tmp_path: Path) -> AsyncIterator[Stack]:
    yield await start_stack(aiohttp_server, tmp_path)


@pytest.fixture
def store() -> Iterator[RedisServer]:
    """A real redis-server on 127.0.0.1 and a free port, no persistence, stopped by PID."""
    if redis_binary() is None:
        skip_missing(REDIS)
    server = start_redis()
    yield server
    server.stop()
