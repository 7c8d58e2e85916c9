"""Speculative stats for engines that do not report them per response the llama.cpp way."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import openai
import pytest

from backends.local.simulator import SimState
from backends.spec import BackendSpec
from router.config import Config
from tests.router.conftest import ServerFactory, start_stack
from tests.router.test_proxy_openai import GREEDY_TECH


def _as_engine(config: Config, engine: str) -> Config:
    backends = [BackendSpec(**{**b.model_dump(), "engine": engine}) for b in config.backends]
    return config.model_copy(update={"backends": backends})


@pytest.mark.parametrize("stream", [False, True])
async def test_prometheus_counter_deltas_when_only_global_counters_exist(
    aiohttp_server: ServerFactory, tmp_path: Path, stream: bool
) -> None:
    mtp = SimState(profile="mtp", stats="prometheus", acceptance={"technical": 0.8})
    stack = await start_stack(aiohttp_server, tmp_path, mtp=mtp, engine="vllm")
    async with stack.client() as client:
        reply = await client.chat.completions.create(**{**GREEDY_TECH, "stream": stream})
        if stream:
            [chunk async for chunk in reply]  # type: ignore[union-attr]
    outcome = (await stack.logged(1))[-1].outcome
    assert outcome.spec_source == "prometheus"
    assert outcome.draft_n == mtp.drafted_total > 0
    assert outcome.draft_accepted == mtp.accepted_total


async def test_sglang_meta_info_is_asked_for_read_and_hidden(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    mtp = SimState(profile="mtp", stats="meta_info")
    stack = await start_stack(aiohttp_server, tmp_path, mtp=mtp, engine="sglang")
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stack.base_url}/chat/completions", json=GREEDY_TECH) as response,
    ):
        body = await response.json()
    assert mtp.received[-1]["body"]["return_meta_info"] is True
    assert "meta_info" not in body["choices"][0]  # the client did not ask for it
    outcome = stack.last.outcome
    assert outcome.spec_source == "meta_info"
    assert outcome.draft_n is not None and outcome.draft_n > 0


@pytest.mark.parametrize("stream", [False, True])
async def test_sglang_reply_without_meta_info_is_the_engines_bytes(
    aiohttp_server: ServerFactory, tmp_path: Path, stream: bool
) -> None:
    """What the client gets is byte for byte what the engine sends a client that did not ask
    for meta_info: the proxy cuts the member out of the text instead of re-encoding it."""
    mtp = SimState(profile="mtp", stats="meta_info")
    stack = await start_stack(aiohttp_server, tmp_path, mtp=mtp, engine="sglang")
    body = {**GREEDY_TECH, "stream": stream}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{stack.base_url}/chat/completions", json=body) as response:
            proxied = await response.read()
        direct_url = f"http://127.0.0.1:{stack.mtp_server.port}/v1/chat/completions"
        async with session.post(direct_url, json=body) as response:
            direct = await response.read()
    assert mtp.received[0]["body"]["return_meta_info"] is True
    assert b"meta_info" not in proxied
    assert proxied == direct


async def test_client_asking_for_meta_info_keeps_it(aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    mtp = SimState(profile="mtp", stats="meta_info")
    stack = await start_stack(aiohttp_server, tmp_path, mtp=mtp, engine="sglang")
    async with stack.client() as client:
        raw = await client.chat.completions.with_raw_response.create(
            **GREEDY_TECH, extra_body={"return_meta_info": True}
        )
    assert "meta_info" in raw.http_response.json()["choices"][0]
    assert isinstance(raw, openai._legacy_response.LegacyAPIResponse)
