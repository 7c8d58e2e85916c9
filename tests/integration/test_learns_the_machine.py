"""The shipped defaults on the real SmolLM2 pair: the router learns this machine, not a prior.

On this CPU the self-drafting mtp instance is about 2.5x slower than the plain one; a router
that trusted a GB10's pace sent 58 of 60 requests to it. Here the shipped policy (prior
`neutral`), the startup probe and one client of 40 requests through the openai SDK, with
Thompson draws on, must send at least 90% to the instance that llama-server's own timings
say is faster, and end with the learned speedup on the right side of 1.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Awaitable, Callable
from pathlib import Path

import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backends.spec import BackendSpec
from policies.learner.observation import PROBE_REASON
from policies.learner.speedup import inputs
from router.app import create_app
from router.config import Config, Limits, LogConfig, SupervisorConfig
from router.learning.online import ONLINE
from router.state import Deps
from tests.integration.conftest import Pair
from tests.router.conftest import ListSink

pytestmark = pytest.mark.integration
ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
PROMPTS = ("Say hello.", "What is the capital of France?", "Name three colours.",
           "Write one sentence about the sea.", "Count to five.",
           "What does a compiler do?", "Give me a synonym for quick.", "Tell me a short joke.")
TEMPERATURES = (None, 0.0, 0.7)


async def test_the_shipped_defaults_route_to_the_faster_instance_of_this_machine(
    pair: Pair, aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    specs = [BackendSpec(name=spec.name, engine="llamacpp", profile=spec.profile,
                         url=spec.base_url) for spec in (pair.mtp, pair.plain)]
    config = Config(backends=specs, default_backend=pair.plain.name, tokenizer=False,
                    log=LogConfig(path=str(tmp_path / "decisions.jsonl")),
                    limits=Limits(connect_timeout_s=5.0),
                    supervisor=SupervisorConfig(log_dir=str(tmp_path / "logs")))
    records = ListSink()
    deps = Deps(sinks=(records,), random=random.Random(11).random, record_interval_s=0.0)
    app = create_app(config, deps=deps)  # the shipped policy: policies/default.yaml
    proxy = await aiohttp_server(app)
    async with openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{proxy.port}/v1", api_key="sk-x",
                                  max_retries=0, timeout=120) as client:
        for i in range(40):
            temperature = TEMPERATURES[i % len(TEMPERATURES)]
            extra = {} if temperature is None else {"temperature": temperature}
            await client.chat.completions.create(
                model=pair.model, max_tokens=32,
                messages=[{"role": "user", "content": f"{PROMPTS[i % len(PROMPTS)]} ({i})"}],
                **extra)

    probes = [r for r in records.records if r.decision.get("reason") == PROBE_REASON]
    served = [r for r in records.records if r.decision.get("reason") != PROBE_REASON]
    assert {r.outcome.backend for r in probes} == {pair.mtp.name, pair.plain.name}
    assert len(served) == 40 and all(r.outcome.status == 200 for r in served)
    # the faster instance, by llama-server's own timings over everything either served
    pace = {name: statistics.median(1000.0 / r.outcome.backend_tps for r in records.records
                                    if r.outcome.backend == name and r.outcome.backend_tps)
            for name in (pair.mtp.name, pair.plain.name)}
    faster = min(pace, key=pace.__getitem__)
    to_faster = sum(r.outcome.backend == faster for r in served)
    print(f"ms/token {pace}; {to_faster} of 40 to {faster}")  # shown with pytest -rP
    assert to_faster >= 36, (pace, [r.outcome.backend for r in served])
    # the learned speedup is on the right side of 1 for a request like these
    speedup = app[ONLINE].model.speedup(inputs({"n_messages": 1}, {"chat": 1.0})).speedup
    print(f"learned speedup of a chat request: {speedup:.3f}")
    assert (speedup < 1.0) == (faster == pair.plain.name), (speedup, pace)
