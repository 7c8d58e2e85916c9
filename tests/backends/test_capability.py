"""The capability probe against real simulated engines on loopback: both probes on every
instance, one at a time, and the verdict on drafting over both."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from backends.capability import (
    COPY_PROMPT,
    FREE_PROMPT,
    PROBES,
    CapabilityError,
    Probe,
    capability_probe,
)
from backends.local.simulator import Fault, SimState, create_sim_app
from backends.spec import BackendSpec, Speculation

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


def ngram(name: str, url: str, engine: str = "llamacpp") -> BackendSpec:
    kind = "ngram-simple" if engine == "llamacpp" else "ngram"
    return BackendSpec(name=name, engine=engine, speculation=Speculation(type=kind), url=url)


def ngram_sim(stats: str = "timings") -> SimState:
    """Prompt lookup: it drafts where the reply repeats the prompt (the copy probe) only."""
    return SimState(profile="mtp", speculation="ngram", model="qwen", stats=stats)


async def test_matching_pair_that_speculates(serve: Serve, session: aiohttp.ClientSession) -> None:
    mtp = SimState(profile="mtp", model="qwen", default_acceptance=0.9)
    specs = [backend("m", "mtp", await serve(mtp)),
             backend("p", "plain", await serve(SimState(profile="plain", model="qwen")))]
    result = await capability_probe(specs, session)
    assert result.ok and result.warnings == ()
    assert result.common_model == "qwen" and result.models == {"m": ("qwen",), "p": ("qwen",)}
    assert (result.drafted["m"] or 0) > 0 and result.drafted["p"] is None
    assert (result.drafts("m"), result.drafts("p"), result.drafts("absent")) == (True, None, None)
    sent = [r["body"] for r in mtp.received]
    assert [(b["messages"][0]["content"], b["max_tokens"]) for b in sent] == [
        (COPY_PROMPT, 64), (FREE_PROMPT, 32)]
    assert all(b["temperature"] == 0 and b["model"] == "qwen" for b in sent)
    result.raise_for_errors()  # nothing to raise


async def test_an_ngram_instance_drafts_on_the_copy_probe_only(
    serve: Serve, session: aiohttp.ClientSession
) -> None:
    specs = [ngram("n", await serve(ngram_sim())),
             backend("p", "plain", await serve(SimState(profile="plain", model="qwen")))]
    result = await capability_probe(specs, session)
    assert result.ok and result.warnings == ()
    answers = result.timed["n"]
    assert list(answers) == ["copy", "free"]
    assert (answers["copy"].report.draft_n or 0) > 0
    assert answers["free"].report.draft_n is None  # nothing drafted, nothing reported
    assert result.drafted["n"] == answers["copy"].report.draft_n and result.drafts("n")


async def test_a_speculating_instance_judged_on_the_free_probe_alone_drafted_nothing(
    serve: Serve, session: aiohttp.ClientSession
) -> None:
    # the same n-gram instance, its drafts counted in Prometheus counters (vLLM's): on a story
    # alone it drafts nothing, and says so
    url = await serve(ngram_sim(stats="prometheus"))
    plain = backend("p", "plain", await serve(SimState(profile="plain", model="qwen")))
    free_only = [probe for probe in PROBES if probe.kind == "free"]
    alone = await capability_probe([ngram("n", url, "vllm"), plain], session, probes=free_only)
    assert alone.drafted["n"] == 0 and alone.drafts("n") is False
    assert alone.backend_warnings == {"n": (
        ("backend 'n' (ngram) drafted no token on the greedy probes (free): its lookup found "
         "nothing to draft (its n-gram bounds may be longer than the probe), or speculation is "
         "not running there" + FLAG_HINT),)}
    both = await capability_probe([ngram("n", url, "vllm"), plain], session)
    assert both.drafts("n") is True
    # it drafted, but only its counters say so: the warning names the flag that puts each
    # answer's drafts in its body
    assert both.warnings == (
        "backend 'n' (ngram): no answer carries its drafts; they are read from /metrics' "
        "counters around requests that run alone, and it is priced from its measured paces"
        + FLAG_HINT,)


FLAG_HINT = "; start it with `--per-request-spec-decode-metrics summary` to have them in each answer"


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
    assert result.drafts("m") is None and set(result.backend_warnings) == {"m"}


async def test_plain_instance_that_speculates_is_a_warning(
    serve: Serve, session: aiohttp.ClientSession
) -> None:
    specs = [backend("m", "mtp", await serve(SimState(profile="mtp", model="x"))),
             backend("p", "plain", await serve(SimState(profile="mtp", model="x")))]
    result = await capability_probe(specs, session)
    assert [w.split(" tokens")[0] for w in result.backend_warnings["p"]] == [
        f"backend 'p' (plain) drafted {result.drafted['p']}"]
    assert result.drafts("p") is True and "m" not in result.backend_warnings


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
    assert {name: list(answers) for name, answers in result.timed.items()} == {
        "m": ["copy", "free"], "p": ["copy", "free"]}
    plain_answer = result.timed["p"]["free"]
    assert plain_answer.report.completion_tokens == 24 and plain_answer.report.backend_tps
    # 24 plain steps of 68 ms at a 0.05 time scale: ~82 ms of wall time
    assert 60.0 < plain_answer.elapsed_ms < 1000.0
    assert plain_answer.body["messages"] == [{"role": "user", "content": FREE_PROMPT}]
    assert result.timed["m"]["free"].report.draft_n


async def test_a_probe_that_fails_is_not_timed(serve: Serve, session: aiohttp.ClientSession) -> None:
    broken = SimState(profile="plain", model="qwen")
    broken.faults.append(Fault("status", status=503))  # the first probe, the copy one
    specs = [backend("m", "mtp", await serve(SimState(profile="mtp", model="qwen"))),
             backend("p", "plain", await serve(broken))]
    result = await capability_probe(specs, session)
    assert list(result.timed["m"]) == ["copy", "free"] and list(result.timed["p"]) == ["free"]
    assert [w.split(": ", 2)[:2] for w in result.backend_warnings["p"]] == [
        ["backend 'p'", "the copy probe request failed"]]


async def test_probes_are_bounded_and_greedy() -> None:
    assert [(p.kind, p.max_tokens) for p in PROBES] == [("copy", 64), ("free", 32)]
    copy = PROBES[0].body("m")
    assert copy == {"model": "m", "messages": [{"role": "user", "content": COPY_PROMPT}],
                    "max_tokens": 64, "temperature": 0, "stream": False}
    assert "```python\n" in COPY_PROMPT and COPY_PROMPT.count("\n") > 25
    assert Probe("x", "hi", 3).body("m")["max_tokens"] == 3
