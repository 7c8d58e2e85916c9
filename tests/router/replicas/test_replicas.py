"""Replicas sharing one real `redis-server`: learned sums, load, conversations, and faults.

Each replica is a real proxy app on 127.0.0.1 in front of simulated engines; the store is a real
redis-server on a free port (backends.local.redisserver), stopped by PID.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import aiohttp
import numpy as np
import openai
import pytest
import redis

from backends.local.redisserver import RedisServer, start_redis
from backends.local.simulator import SimState, create_sim_app
from backends.spec import BackendSpec
from backends.stats import parse_sample
from decisionlog.readers import iter_log_records
from policies import RouteModel, learn_arms, observations
from policies.learner.routemodel import gather
from router.app import create_app
from router.config import Config, LoadConfig, LogConfig, ReplicasConfig, SupervisorConfig
from router.instances.pool import POOL
from router.learning.online import ONLINE
from router.replicas.link import REPLICAS
from router.replicas.loops import sync_sums_once
from router.state import DEPS, POLICY, Deps
from tests.router.conftest import ListSink, ServerFactory, gb10_policy

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Fleet:
    engines: list[BackendSpec]
    states: dict[str, SimState]
    tmp: Path


async def fleet(aiohttp_server: ServerFactory, tmp: Path, *, engine: str = "llamacpp",
                plains: int = 1, time_scale: float = 0.0) -> Fleet:
    """Simulated engines: one mtp and `plains` plain instances, GB10-paced."""
    states = {"mtp-0": SimState(profile="mtp", acceptance={"technical": 0.8},
                                time_scale=time_scale)}
    for i in range(plains):
        states[f"plain-{i}"] = SimState(profile="plain", time_scale=time_scale, reply_tokens=24)
    specs = []
    for name, sim in states.items():
        server = await aiohttp_server(create_sim_app(sim))
        specs.append(BackendSpec(name=name, engine=engine, profile=sim.profile,
                                 url=f"http://127.0.0.1:{server.port}"))
    return Fleet(specs, states, tmp)


def replica_config(f: Fleet, name: str, store_url: str, **replicas: Any) -> Config:
    return Config(
        backends=f.engines, tokenizer=False, classifier="rules",
        log=LogConfig(path=str(f.tmp / f"{name}.jsonl")),
        supervisor=SupervisorConfig(log_dir=str(f.tmp / "backends"), startup_probe=False,
                                    health_interval_s=60.0),
        policy=gb10_policy(f.tmp),
        replicas=ReplicasConfig(store=store_url, id=name, namespace="t",
                                sync_interval_s=0.1, load_interval_s=0.05, timeout_s=1.0,
                                **replicas),
        load=LoadConfig(interval_s=0.05, max_age_s=1.0),
    )


async def replica(aiohttp_server: ServerFactory, config: Config) -> Any:
    return await aiohttp_server(create_app(config, deps=Deps(
        sinks=(ListSink(),), explore=False, record_interval_s=0.0)))


def client(server: Any, **kwargs: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="k",
                              max_retries=0, **kwargs)


ASKS = [
    "Write a Python function that parses a CSV file and returns the rows as dicts.",
    "Explain how TCP congestion control reacts to packet loss, in technical detail.",
    "Tell me a short story about a lighthouse keeper and the sea.",
    "```python\ndef add(a, b):\n    return a + b\n```\nAdd type hints and a docstring.",
]


async def send(server: Any, n: int, offset: int = 0, **extra: Any) -> list[str]:
    """`n` chat requests; returns the backends that served them."""
    served = []
    async with client(server) as c:
        for i in range(n):
            raw = await c.chat.completions.with_raw_response.create(
                model="sim-model", temperature=0 if (i + offset) % 3 else 0.7,
                messages=[{"role": "user", "content": ASKS[(i + offset) % len(ASKS)]}], **extra)
            served.append(raw.headers["x-specroute-backend"])
    return served


async def eventually(check: Any, what: str, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.05)):  # bounded
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {seconds} s: {what}")


async def readyz(server: Any) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(
            f"http://127.0.0.1:{server.port}/readyz") as response:
        return dict(await response.json())


def union_model(app: Any, logs: list[Path]) -> tuple[RouteModel, Any]:
    """What one process learns from the union of the replicas' logs."""
    snapshot = app[POLICY].snapshot
    obs = list(observations(iter_log_records([str(p) for p in logs])))
    evidence = gather(obs, snapshot.policy.assume)
    return RouteModel(snapshot.prior, evidence), learn_arms(obs)


async def test_replicas_fed_disjoint_traffic_decide_with_the_union_s_posterior(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path)
    names = ["a", "b", "c"]
    servers = [await replica(aiohttp_server, replica_config(f, n, store.url)) for n in names]
    for i, server in enumerate(servers):
        await send(server, 6 + 3 * i, offset=i)
    for server in servers:  # each has published and read the others' at least once more
        await sync_sums_once(server.app, server.app[REPLICAS])
    for server in servers:
        await sync_sums_once(server.app, server.app[REPLICAS])
    union, union_arms = union_model(servers[0].app, [tmp_path / f"{n}.jsonl" for n in names])
    assert union.evidence.n_speculating + union.evidence.plain.n == 6 + 9 + 12
    for server in servers:
        model = server.app[ONLINE].model
        assert model.evidence.greedy_of("mtp").n == union.evidence.greedy_of("mtp").n
        assert model.evidence.plain.n == union.evidence.plain.n
        np.testing.assert_allclose(model.evidence.greedy_of("mtp").xtx, union.evidence.greedy_of("mtp").xtx,
                                   rtol=0, atol=1e-9)
        np.testing.assert_allclose(model.posterior.mean, union.posterior.mean, rtol=0, atol=1e-9)
        assert model.t_plain_ms == pytest.approx(union.t_plain_ms, abs=1e-9)
        arms = server.app[ONLINE].arms
        assert arms.n_observations == union_arms.n_observations
        for key, table in union_arms.stats.items():
            for arm, stats in table.items():
                assert arms.stats[key][arm].total.total == pytest.approx(stats.total.total,
                                                                         abs=1e-9)
    health = (await readyz(servers[0]))["store"]
    assert health["state"] == "ok" and health["replicas"] == ["b", "c"]
    # knowing each other, they deal the 2 instances out (a the first, b the second, c none)
    # and rank their own first among equals (ties spread, not piled)

    def ranks() -> list[tuple[int, ...]]:
        return [tuple(s.tie_rank for s in server.app[POOL].states(0.0)) for server in servers]

    await eventually(lambda: ranks() == [(0, 1), (1, 0), (0, 1)], "the instances dealt out")


@pytest.mark.parametrize("engine", ["llamacpp", "openai"])
async def test_a_replica_avoids_an_instance_busy_with_another_replica_s_request(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer, engine: str) -> None:
    # llamacpp: B reads the engine's own queue gauges; openai (no gauges): A's published count
    f = await fleet(aiohttp_server, tmp_path, engine=engine, plains=2, time_scale=1.0)
    a = await replica(aiohttp_server, replica_config(f, "a", store.url))
    b = await replica(aiohttp_server, replica_config(f, "b", store.url))
    async with client(a) as ca, client(b) as cb:
        first = asyncio.create_task(ca.chat.completions.with_raw_response.create(**STORY))
        await eventually(lambda: f.states["plain-0"].serving == 1, "A's request on plain-0")
        await eventually(lambda: others_on(b, "plain-0") == 1, "B counts it on plain-0")
        second = await cb.chat.completions.with_raw_response.create(**STORY)
        assert (await first).headers["x-specroute-backend"] == "plain-0"
    assert second.headers["x-specroute-backend"] == "plain-1"
    assert f.states["plain-0"].received and f.states["plain-1"].received


async def test_without_the_shared_load_a_replica_would_pile_onto_the_busy_instance(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    # the control for the test above: two replicas that share nothing and read no gauges
    f = await fleet(aiohttp_server, tmp_path, engine="openai", plains=2, time_scale=1.0)
    configs = [replica_config(f, n, "").model_copy(update={"load": LoadConfig(gauges=False)})
               for n in ("a", "b")]
    a, b = [await replica(aiohttp_server, c) for c in configs]
    async with client(a) as ca, client(b) as cb:
        first = asyncio.create_task(ca.chat.completions.with_raw_response.create(**STORY))
        await eventually(lambda: f.states["plain-0"].serving == 1, "A's request on plain-0")
        second = await cb.chat.completions.with_raw_response.create(**STORY)
        await first
    assert second.headers["x-specroute-backend"] == "plain-0"


async def test_an_instance_another_replica_just_freed_is_seen_free_at_once(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    # no gauges and a heartbeat of a minute: only the start and end as they happen can tell B
    f = await fleet(aiohttp_server, tmp_path, plains=2, time_scale=1.0)
    configs = [replica_config(f, n, store.url).model_copy(update={
        "load": LoadConfig(gauges=False, max_age_s=120.0),
        "replicas": ReplicasConfig(store=store.url, id=n, namespace="t", load_interval_s=60.0,
                                   timeout_s=1.0)}) for n in ("a", "b")]
    a, b = [await replica(aiohttp_server, c) for c in configs]
    await eventually(lambda: b.app[REPLICAS].health.state == "ok", "B follows the store")
    async with client(a) as ca:
        first = asyncio.create_task(ca.chat.completions.with_raw_response.create(**STORY))
        await eventually(lambda: sum(others_on(b, n) for n in b.app[POOL].names) == 1,
                         "B counts A's request")
        used = next(n for n in b.app[POOL].names if others_on(b, n))
        mine = list(a.app[POOL].runtime(used).running.values())  # where A sent it
        work = b.app[POOL].runtime(used).replicas["a"].running
        assert len(mine) == len(work) == 1 and work[0].predicted_ms > 0  # as A priced it
        # with how far its length may stray and its time at max_tokens (none asked: 0): its
        # time left is priced alike on both
        assert mine[0].spread > 0.0 and mine[0].most_ms == 0.0
        assert (work[0].predicted_ms, work[0].spread, work[0].most_ms) == (
            mine[0].predicted_ms, mine[0].spread, mine[0].most_ms)
        await first
    await eventually(lambda: others_on(b, used) == 0, "B sees it end", seconds=2.0)


async def test_a_replica_learns_how_often_it_meets_another_s_request_where_it_sent_blind(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, time_scale=1.0)  # mtp-0, plain-0
    # b publishes once here, no heartbeat: it must not be forgotten while the test runs
    a = await replica(aiohttp_server, replica_config(f, "a", store.url).model_copy(
        update={"load": LoadConfig(interval_s=0.05, max_age_s=30.0)}))
    await eventually(lambda: a.app[REPLICAS].health.state == "ok", "A follows the store")
    raw = redis.Redis.from_url(store.url)

    def announce(work: dict[str, Any]) -> None:  # replica b, as it would publish itself
        raw.publish("t:load", json.dumps({"replica": "b", "work": work}))

    announce({})
    # with b known, the pair is dealt out: mtp-0 to a, plain-0 to b
    await eventually(lambda: a.app[POOL].describe(0.0)[1]["own_share"] is False, "dealt out")
    assert a.app[POOL].contention.risk() == 0.0
    async with client(a) as ca:
        sent = asyncio.create_task(ca.chat.completions.with_raw_response.create(**STORY))
        await eventually(lambda: bool(a.app[POOL].runtime("plain-0").running), "A sends it")
        announce({"plain-0": [[900.0, 400.0]]})  # b's request there had started before A's
        await eventually(lambda: a.app[POOL].contention.risk() > 0.0, "A counts a collision")
        response = await sent
    assert response.http_response.status_code == 200
    async with aiohttp.ClientSession() as session, session.get(
            f"http://127.0.0.1:{a.port}/metrics") as metrics:
        text = await metrics.text()
    samples = dict(s for s in map(parse_sample, text.splitlines()) if s is not None)
    assert samples["specroute_replica_collision_risk"] == pytest.approx(
        a.app[POOL].contention.risk())
    assert samples["specroute_replica_collision_risk"] > 0.0
    # its own publications came back through the store: the channel's latency, measured
    latency = a.app[REPLICAS].channel_latency_s
    assert 0.0 < latency < 1.0
    assert samples["specroute_replica_channel_latency_seconds"] > 0.0


async def test_a_replica_that_stops_publishing_stops_counting(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2)
    config = replica_config(f, "b", store.url).model_copy(update={
        "load": LoadConfig(gauges=False, max_age_s=0.5)})
    b = await replica(aiohttp_server, config)
    await eventually(lambda: b.app[REPLICAS].health.state == "ok", "B follows the store")
    raw = redis.Redis.from_url(store.url)
    entry = json.dumps({"replica": "gone", "work": {"plain-0": [[900.0, 10.0], [900.0, 0.0]]}})
    raw.publish("t:load", entry)  # its last word before a SIGKILL
    await eventually(lambda: others_on(b, "plain-0") == 2, "B counts its two requests")
    await asyncio.sleep(0.6)  # no heartbeat since: gone, not busy forever
    assert others_on(b, "plain-0") == 0


STORY = {"model": "sim-model", "temperature": 0.7,
         "messages": [{"role": "user", "content": "Tell me a story about the sea."}]}


async def one_in_flight(c: openai.AsyncOpenAI, f: Fleet) -> tuple[asyncio.Task[Any], str]:
    """A long request sent through `c`, once an engine serves it: its task and that instance."""
    first = asyncio.create_task(c.chat.completions.with_raw_response.create(**STORY))
    await eventually(lambda: sum(s.serving for s in f.states.values()) == 1, "it is served")
    return first, next(n for n, s in f.states.items() if s.serving)


def others_on(server: Any, backend: str) -> int:
    return int(server.app[POOL].others_inflight(backend, server.app[DEPS].clock()))


LONG_SYSTEM = "You are a careful assistant for a large codebase. " * 400  # ~8k prompt tokens
LONG_TURN: dict[str, Any] = {
    "model": "sim-model", "temperature": 0.7,
    "messages": [{"role": "system", "content": LONG_SYSTEM},
                 {"role": "user", "content": "Where is the retry logic?"}]}


async def test_a_conversation_s_next_turn_stays_on_its_instance_whichever_replica_takes_it(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2)
    configs = [replica_config(f, n, store.url).model_copy(update={"pools": {"second": ["plain-1"]}})
               for n in ("a", "b")]
    a, b = [await replica(aiohttp_server, c) for c in configs]
    turn = {"model": "sim-model", "temperature": 0.7,
            "messages": [{"role": "system", "content": LONG_SYSTEM},
                         {"role": "user", "content": "Where is the retry logic?"}]}
    hint = {"x-specroute-conversation": "conv-1"}
    async with client(a, default_headers={**hint, "x-specroute-route": "second"}) as ca:
        first = await ca.chat.completions.with_raw_response.create(**turn)
    assert first.headers["x-specroute-backend"] == "plain-1"
    await eventually(lambda: b.app[REPLICAS].health.conversations_in >= 1, "B hears of the turn")
    async with client(b, default_headers=hint) as cb:
        second = await cb.chat.completions.with_raw_response.create(**turn)
        # a new conversation with the same prompt, on B, goes where the tie-break says
        other = await cb.chat.completions.with_raw_response.create(
            **turn, extra_headers={"x-specroute-conversation": "conv-2"})
    assert second.headers["x-specroute-backend"] == "plain-1"
    assert other.headers["x-specroute-backend"] == "plain-0"


async def test_a_replica_that_starts_later_reads_back_the_live_conversations(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path, plains=2)
    pools = {"pools": {"second": ["plain-1"]}}
    a = await replica(aiohttp_server, replica_config(f, "a", store.url).model_copy(update=pools))
    hint = {"x-specroute-conversation": "conv-late"}
    async with client(a, default_headers={**hint, "x-specroute-route": "second"}) as ca:
        await ca.chat.completions.create(**LONG_TURN)
    await eventually(lambda: a.app[REPLICAS].health.conversations_out == 1, "A shared it")
    b = await replica(aiohttp_server, replica_config(f, "b", store.url).model_copy(update=pools))
    await eventually(lambda: b.app[REPLICAS].health.conversations_in == 1, "B read it back")
    async with client(b, default_headers=hint) as cb:
        second = await cb.chat.completions.with_raw_response.create(**LONG_TURN)
    assert second.headers["x-specroute-backend"] == "plain-1"


class SilentServer:
    """A TCP server that accepts and never answers (a store that hangs), or answers junk."""

    def __init__(self, reply: bytes = b"") -> None:
        self.reply = reply
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Self:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(4096):
                if self.reply:
                    writer.write(self.reply)
                    await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.mark.parametrize("kind", ["down", "hangs", "garbage"])
async def test_a_store_that_is_down_hangs_or_answers_garbage_fails_no_request(
        aiohttp_server: ServerFactory, tmp_path: Path, kind: str,
        store: RedisServer) -> None:  # `store`: a redis-server exists, for when it comes up
    f = await fleet(aiohttp_server, tmp_path)
    async with SilentServer(b"\x00\xffnot redis\r\n" if kind == "garbage" else b"") as fake:
        port = free_port() if kind == "down" else fake.port
        server = await replica(aiohttp_server, replica_config(f, "a", f"redis://127.0.0.1:{port}/0"))
        served = await send(server, 5)
        assert len(served) == 5
        await eventually(lambda: server.app[REPLICAS].health.state == "failing", "failing")
        health = (await readyz(server))["store"]
        assert health["state"] == "failing" and health["failures"] >= 1 and health["last_error"]
        async with aiohttp.ClientSession() as session, session.get(
                f"http://127.0.0.1:{server.port}/metrics") as response:
            text = await response.text()
        assert "specroute_store_up 0.0" in text
        assert total_n(server) == 5  # its own records still count
        if kind == "down":  # the store comes up: the replica publishes what it learned
            late = start_redis(port)
            try:
                await eventually(lambda: server.app[REPLICAS].health.state == "ok", "ok again")
                await eventually(lambda: published_n(late.url, "a") == 5, "its 5 published")
            finally:
                late.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_store_killed_midway_then_back_keeps_the_last_sums_and_converges(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path)
    a, b = [await replica(aiohttp_server, replica_config(f, n, store.url)) for n in ("a", "b")]
    await send(a, 4)
    await send(b, 6)
    await eventually(lambda: total_n(a) == 10 and total_n(b) == 10, "both see all 10")
    store.stop(signal.SIGKILL)
    assert len(await send(a, 3)) == 3  # served with the store gone
    await eventually(lambda: a.app[REPLICAS].health.state == "failing", "A sees it fail")
    assert total_n(b) == 10  # B keeps the sums it last read
    restarted = start_redis(store.port)  # empty: the replicas publish theirs again
    try:
        await eventually(lambda: total_n(a) == 13 and total_n(b) == 13, "converged again")
        assert (await readyz(b))["store"]["state"] == "ok"
    finally:
        restarted.stop()


def total_n(server: Any) -> int:
    evidence = server.app[ONLINE].model.evidence
    return int(evidence.plain.n + evidence.n_speculating)


def published_n(url: str, name: str) -> int:
    """How many records `name`'s published sums hold; -1 before it published any (a check
    that `eventually` retries: the store may be up a moment before the replica's next sync)."""
    raw = redis.Redis.from_url(url).hget("t:sums", name)
    if raw is None:
        return -1
    evidence = json.loads(raw)["evidence"]
    speculating = sum(sums["n"] for sums in evidence["greedy"].values()) + sum(
        sums[0] for sums in evidence["sampled"].values())
    return int(speculating + evidence["plain"][0])


def process_replica(f: Fleet, store: RedisServer, sync: str, extra: str = ""
                    ) -> tuple[Callable[[], Awaitable[subprocess.Popen[bytes]]], int]:
    """Replica `a` as its own `specroute serve` process (so that it can be SIGKILLed), from a
    config file in the fleet's directory; (start it, its port)."""
    config = f.tmp / "a.yaml"
    backends = "".join(f"  - {{name: {s.name}, engine: llamacpp, profile: {s.profile}, "
                       f"url: '{s.base_url}'}}\n" for s in f.engines)
    config.write_text(
        "backends:\n" + backends + "tokenizer: false\nclassifier: rules\n"
        f"policy: {gb10_policy(f.tmp)}\nlog: {{path: a.jsonl}}\n"
        "supervisor: {startup_probe: false}\n" + extra
        + f"replicas: {{store: '{store.url}', id: a, namespace: t, {sync}}}\n")
    port = free_port()

    async def start() -> subprocess.Popen[bytes]:
        process = subprocess.Popen(  # noqa: ASYNC220  # forks and returns; waits are bounded
            [sys.executable, "-m", "router", "serve", "--config", str(config), "--port",
             str(port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        await eventually(lambda: _answers(port), "replica a ready", seconds=20)
        return process

    return start, port


async def test_a_replica_killed_with_sigkill_and_restarted_counts_nothing_twice(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path)
    b = await replica(aiohttp_server, replica_config(f, "b", store.url))
    start, port = process_replica(f, store, "sync_interval_s: 0.1")

    process = await start()
    try:
        await send(_Port(port), 5)
        await eventually(lambda: published_n(store.url, "a") == 5, "a published its 5")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        process = await start()
        await send(_Port(port), 2)
        await eventually(lambda: published_n(store.url, "a") == 7, "a's 5 restored, plus 2")
        await eventually(lambda: total_n(b) == 7, "B adds a's 7 once")
        await asyncio.sleep(0.5)  # several more sync rounds: still counted once
        assert published_n(store.url, "a") == 7 and total_n(b) == 7
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)


async def test_a_replica_killed_right_after_a_request_relearns_it_before_it_publishes(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    """Its records written after its last publish are in every replica's evidence within
    seconds of its restart, not a learn.interval_s later: it relearns its own log first."""
    f = await fleet(aiohttp_server, tmp_path)
    b = await replica(aiohttp_server, replica_config(f, "b", store.url))
    # a publishes at start, then not for 10 minutes; learns every 5
    start, port = process_replica(f, store, "sync_interval_s: 600", "learn: {interval_s: 300}\n")

    process = await start()
    try:
        await eventually(lambda: published_n(store.url, "a") == 0, "a's first publish")
        await send(_Port(port), 3)
        log = tmp_path / "a.jsonl"
        await eventually(lambda: log.exists() and len(log.read_text().splitlines()) == 3,
                         "a wrote its 3 records")
        process.send_signal(signal.SIGKILL)  # right after: none of the 3 was published
        process.wait(timeout=10)
        assert published_n(store.url, "a") == 0 and total_n(b) == 0
        process = await start()
        await eventually(lambda: published_n(store.url, "a") == 3, "a relearned its 3")
        await eventually(lambda: total_n(b) == 3, "B counts a's 3")
        async with aiohttp.ClientSession() as session, session.get(
                f"http://127.0.0.1:{port}/readyz") as response:
            pace = (await response.json())["route_model"]["pace"]
        assert sum(p["n"] for p in pace.values()) == 3  # a's own model counts them too
        await send(_Port(port), 1)
        await asyncio.sleep(0.3)
        assert published_n(store.url, "a") == 3  # not republished before its next sync
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
    assert published_n(store.url, "a") == 4  # its last word at shutdown: 4, none twice


@dataclass
class _Port:
    port: int


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


async def test_other_replicas_garbage_is_skipped_and_their_good_sums_still_added(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    f = await fleet(aiohttp_server, tmp_path)
    a, b = [await replica(aiohttp_server, replica_config(f, n, store.url)) for n in ("a", "b")]
    await send(b, 3)
    raw = redis.Redis.from_url(store.url)
    raw.hset("t:sums", "junk", b"{not json")
    raw.hset("t:sums", "nan", json.dumps({"version": 1, "replica": "nan", "through": "",
                                           "evidence": {"yy": float("nan")}, "arms": {}}))
    raw.set("t:load:liar", b'{"plain-0": -5, "mtp-0": "many"}')
    raw.sadd("t:replicas", "liar")
    raw.xadd("t:turns", {"replica": "liar", "turns": "[[1, 2]]"})
    await eventually(lambda: total_n(a) == 3, "A adds B's 3")
    await eventually(lambda: a.app[REPLICAS].health.bad_entries >= 3, "bad entries counted")
    before = a.app[REPLICAS].health.bad_entries
    for junk in (b"{not json", b'{"replica": "liar", "work": {"plain-0": [[1e400, 0]]}}',
                 b'{"replica": "liar", "work": {"plain-0": [[-1, 0]]}}'):
        raw.publish("t:load", junk)
    await eventually(lambda: a.app[REPLICAS].health.bad_entries >= before + 3,
                     "garbage on the load channel counted")
    assert a.app[REPLICAS].health.replicas == ["b"]
    assert others_on(a, "plain-0") == 0


async def test_with_the_store_killed_a_replica_reads_the_gauges_faster_and_avoids_the_other_s(
        aiohttp_server: ServerFactory, tmp_path: Path, store: RedisServer) -> None:
    # gauges read once a minute while the other replica is heard: only the outage's faster
    # pace can show A the request B sends once the store is gone
    f = await fleet(aiohttp_server, tmp_path, plains=2, time_scale=1.0)
    load = LoadConfig(interval_s=60.0, unheard_interval_s=0.05, max_age_s=1.0)
    a, b = [await replica(aiohttp_server, replica_config(f, n, store.url).model_copy(
        update={"load": load})) for n in ("a", "b")]
    await eventually(lambda: any(not d["own_share"] for d in a.app[POOL].describe(0.0)),
                     "A hears B and deals the instances out")
    assert not a.app[POOL].others_unheard(a.app[DEPS].clock())
    store.stop(signal.SIGKILL)
    await eventually(lambda: a.app[POOL].others_unheard(a.app[DEPS].clock()),
                     "A no longer hears B")
    async with client(a) as ca, client(b) as cb:
        first, busy = await one_in_flight(cb, f)
        await eventually(lambda: others_on(a, busy) == 1, "A sees it in the gauges")
        assert a.app[POOL].runtime(busy).bypass == 1  # from the gauges: the channel is gone
        second = await ca.chat.completions.with_raw_response.create(**STORY)
        assert (await first).headers["x-specroute-backend"] == busy
    assert second.headers["x-specroute-backend"] != busy
    assert (await readyz(a))["store"]["state"] == "failing"
