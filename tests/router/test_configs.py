"""Three instances with three speculation configs behind the real proxy, the real openai
client in front: the records name each serving config, and the route model learns, from the
startup probe and the requests, to send code edits to the n-gram instance and prose elsewhere.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import openai

from backends.local.simulator import MACHINES, SimState, create_sim_app
from backends.spec import BackendSpec, Speculation
from policies.store import DEFAULT_POLICY
from router.app import create_app
from router.config import Config, Limits, LogConfig, SupervisorConfig
from router.state import Deps
from tests.router.conftest import ListSink, ServerFactory

# 2 CPU cores as measured: the draft model loses everywhere, prompt lookup wins on copies.
CPU = MACHINES["cpu-pair"]
MODULE = "\n".join(
    [f"def helper_{i}(values):\n    total = 0\n    for v in values:\n        total += v * {i}\n"
     f"    return total\n" for i in range(8)])


def _edit(i: int) -> dict[str, object]:
    ask = (f"Rename helper_{i % 8} to scaled_sum_{i} in this module and return the whole "
           f"module:\n```python\n{MODULE}```")
    return {"model": "m", "temperature": 0, "max_tokens": 96,
            "messages": [{"role": "user", "content": ask}]}


def _story(i: int) -> dict[str, object]:
    return {"model": "m", "temperature": 0, "max_tokens": 96,
            "messages": [{"role": "user", "content": f"Write a short story about a lighthouse "
                          f"keeper, number {i}."}]}


async def _stack(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> tuple[openai.AsyncOpenAI, ListSink]:
    """The three instances and the proxy, from cold (the startup probe on); the real openai
    client pointed at it."""
    sims = {
        "plain-0": SimState(profile="plain", cost=CPU),
        "ngram-0": SimState(profile="mtp", cost=CPU, speculation="ngram"),
        "draft-0": SimState(profile="mtp", cost=CPU, acceptance={"code": 0.9}),
    }
    servers = {name: await aiohttp_server(create_sim_app(sim)) for name, sim in sims.items()}
    specs = [
        BackendSpec(name="plain-0", engine="llamacpp", profile="plain",
                    url=f"http://127.0.0.1:{servers['plain-0'].port}"),
        BackendSpec(name="ngram-0", engine="llamacpp",
                    speculation=Speculation(type="ngram-simple"),
                    url=f"http://127.0.0.1:{servers['ngram-0'].port}"),
        BackendSpec(name="draft-0", engine="llamacpp",
                    speculation=Speculation(type="draft", depth=1),
                    url=f"http://127.0.0.1:{servers['draft-0'].port}"),
    ]
    config = Config(backends=specs, default_backend="plain-0", tokenizer=False,
                    classifier="rules", policy=DEFAULT_POLICY,
                    log=LogConfig(path=str(tmp_path / "decisions.jsonl")),
                    limits=Limits(connect_timeout_s=2.0),
                    supervisor=SupervisorConfig(log_dir=str(tmp_path / "backends"),
                                                startup_probe=True))
    sink = ListSink()
    proxy = await aiohttp_server(create_app(config, deps=Deps(sinks=(sink,),
                                                              record_interval_s=0.0)))
    return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{proxy.port}/v1", api_key="sk",
                              max_retries=0), sink


async def test_edits_learn_their_way_to_the_ngram_instance_and_prose_does_not(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    client, sink = await _stack(aiohttp_server, tmp_path)
    served: list[tuple[str, str]] = []
    for i in range(24):
        for kind, body in (("edit", _edit(i)), ("story", _story(i))):
            raw = await client.chat.completions.with_raw_response.create(**body)  # type: ignore[call-overload]
            served.append((kind, raw.headers["x-specroute-backend"]))
    records = [r for r in sink.records if r.decision.get("reason") != "probe"]
    configs = {r.outcome.backend: r.outcome.spec for r in records}
    assert configs.get("ngram-0") == "ngram-simple"
    assert set(configs.values()) <= {"plain", "ngram-simple", "draft"}
    late = Counter(served[20:])
    edits = sum(n for (kind, _), n in late.items() if kind == "edit")
    assert late[("edit", "ngram-0")] >= 0.9 * edits
    assert late[("story", "ngram-0")] + late[("story", "draft-0")] <= 0.2 * edits
    probes = [r for r in sink.records if r.decision.get("reason") == "probe"]
    assert {r.outcome.spec for r in probes} == {"plain", "ngram-simple", "draft"}


async def test_a_config_is_a_pool_a_client_or_a_route_can_name(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    client, _ = await _stack(aiohttp_server, tmp_path)
    for pool, backend in (("ngram-simple", "ngram-0"), ("draft", "draft-0"), ("plain", "plain-0")):
        raw = await client.chat.completions.with_raw_response.create(  # type: ignore[call-overload]
            **_story(0), extra_headers={"x-specroute-route": pool})
        assert raw.headers["x-specroute-backend"] == backend


def test_a_named_pool_cannot_take_a_configs_name() -> None:
    import pytest
    from pydantic import ValidationError

    specs = [BackendSpec(name="a", engine="llamacpp", profile="plain", url="http://127.0.0.1:1"),
             BackendSpec(name="b", engine="llamacpp", url="http://127.0.0.1:2",
                         speculation=Speculation(type="ngram-mod"))]
    assert Config(backends=specs).pools_of("b") == frozenset({"ngram-mod"})
    with pytest.raises(ValidationError, match="built-in pool"):
        Config(backends=specs, pools={"ngram-mod": ["a"]})
