"""The capability probe against real simulated engines on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from backends.capability import PROBE_MAX_TOKENS, PROBE_PROMPT, CapabilityError, capability_probe
from backends.local.simulator import Fault, SimState, create_sim_app
from backends.spec import BackendSpec

Serve = Callable[[SimState], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    runners: list[web.AppRunner] = []

    async def start(state: SimState) -> str:
        runner = web.AppRunner(create_sim_app(state))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


def backend(name: str, profile: str, url: str) -> BackendSpec:
    return BackendSpec(name=name, engine="llamacpp", profile=profile, url=url)


async def test_matching_pair_that_speculates(serve: Serve, session: aiohttp.ClientSession) -> None:
    mtp = SimState(profile="mtp", model="qwen", default_acceptance=0.9)
    specs = [backend("m", "mtp", await serve(mtp)),
             backend("p", "plain", await serve(SimState(profile="plain", model="qwen")))]
    result = await capability_probe(specs, session)
    assert result.ok and result.warnings == ()
    assert result.common_model == "qwen" and result.models == {"m": ("qwen",), "p": ("qwen",)}
    assert (result.drafted["m"] or 0) > 0 and result.drafted["p"] is None
    sent = mtp.received[0]["body"]
    assert sent["temperature"] == 0 and sent["model"] == "qwen" and sent["max_tokens"] == PROBE_MAX_TOKENS
    result.raise_for_errors()  # nothing to raise


async def test_different_models_refuse_to_start(serve: Serve, session: aiohttp.ClientSession) -> None:
    specs = [backend("m", "mtp", await serve(SimState(profile="mtp", model="qwen-1.5b"))),
             backend("p", "plain", await serve(SimState(profile="plain", model="llama-8b")))]
    result = await capability_probe(specs, session)
    assert not result.ok
    with pytest.raises(CapabilityError, match=r"'m' \(mtp\) and 'p' \(plain\) serve different "
                                              r"models: \['qwen-1.5b'\] vs \['llama-8b'\]"):
        result.raise_for_errors()


async def test_mtp_instance_without_drafts_is_a_warning(
    serve: Serve, session: aiohttp.ClientSession
) -> None:
    # a "mtp" backend that is really plain: the simulator reports no draft counters
    specs = [backend("m", "mtp", await serve(SimState(profile="plain", model="x"))),
             backend("p", "plain", await serve(SimState(profile="plain", model="x")))]
    result = await capability_probe(specs, session)
    assert result.ok
    assert result.warnings == (("backend 'm' (mtp): the engine reports no draft statistics; "
                               "speculation cannot be confirmed (decode tokens/s is still "
                               "measured)"),)


async def test_plain_instance_that_speculates_is_a_warning(
    serve: Serve, session: aiohttp.ClientSession
) -> None:
    specs = [backend("m", "mtp", await serve(SimState(profile="mtp", model="x"))),
             backend("p", "plain", await serve(SimState(profile="mtp", model="x")))]
    result = await capability_probe(specs, session)
    assert any("'p' (plain) drafted" in warning for warning in result.warnings)


async def test_unreachable_backend_is_reported(serve: Serve, session: aiohttp.ClientSession) -> None:
    specs = [backend("m", "mtp", await serve(SimState(profile="mtp", model="x"))),
             backend("gone", "plain", "http://127.0.0.1:9")]
    result = await capability_probe(specs, session, timeout_s=5)
    assert result.ok and result.models["gone"] == ()
    assert any("'gone': cannot list models" in warning for warning in result.warnings)
    assert "gone" not in result.drafted


async def test_probes_run_one_at_a_time_and_keep_their_timed_answers(
    serve: Serve, session: aiohttp.ClientSession
) -> None:
    # paced engines (a 24-token reply at 68 ms a step x 0.05): two instances on one machine
    # must not share it while they are timed
    mtp = SimState(profile="mtp", model="qwen", default_acceptance=0.9, time_scale=0.05)
    plain = SimState(profile="plain", model="qwen", time_scale=0.05)
    specs = [backend("m", "mtp", await serve(mtp)), backend("p", "plain", await serve(plain))]
    peak = {"in_flight": 0}

    async def watch() -> None:
        for _ in range(400):  # bounded: 2 s
            peak["in_flight"] = max(peak["in_flight"], mtp.inflight + plain.inflight)
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    result = await capability_probe(specs, session)
    watcher.cancel()
    assert peak["in_flight"] == 1
    assert set(result.timed) == {"m", "p"}
    plain_answer = result.timed["p"]
    assert plain_answer.report.completion_tokens == 24 and plain_answer.report.backend_tps
    # 24 plain steps of 68 ms at a 0.05 time scale: ~82 ms of wall time
    assert 60.0 < plain_answer.elapsed_ms < 1000.0
    assert plain_answer.body["messages"] == [{"role": "user", "content": PROBE_PROMPT}]
    assert result.timed["m"].report.draft_n


async def test_a_probe_that_fails_is_not_timed(serve: Serve, session: aiohttp.ClientSession) -> None:
    broken = SimState(profile="plain", model="qwen")
    broken.faults.append(Fault("status", status=503))
    specs = [backend("m", "mtp", await serve(SimState(profile="mtp", model="qwen"))),
             backend("p", "plain", await serve(broken))]
    result = await capability_probe(specs, session)
    assert set(result.timed) == {"m"} and any("probe request failed" in w for w in result.warnings)
