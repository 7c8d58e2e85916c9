"""`specroute demo --replicas 2`: the demo's instances behind two replicas sharing a real
redis-server, nginx round robin in front (deploy/nginx/specroute.conf as shipped).

The same three phases and table as `specroute demo` (router.ops.demo), every request through
nginx, so each replica serves about half of them; then what each replica decides with (its own
records and those it learned from the other, through the store), and one conversation of three
turns, each taken by the replica nginx hands it to, staying on the instance that holds its
prefix. Everything listens on 127.0.0.1; redis-server and nginx are stopped by their PIDs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
from aiohttp import web

from backends.local.cache import free_loopback_port
from backends.local.nginx import start_nginx
from backends.local.redisserver import start_redis
from backends.spec import BackendSpec
from policies import Sums
from router.app import create_app, reload_once
from router.config import Config, LogConfig, ReplicasConfig, SupervisorConfig
from router.learning.online import ONLINE
from router.learning.relearn import LEARNER
from router.ops.demo import (
    Stop,
    _backends,
    _Collect,
    _replay,
    demo_policy,
    demo_tokens,
    format_table,
)
from router.ops.workload import FUNCTIONS, requests_for
from router.replicas.link import REPLICAS
from router.serve import start_site
from router.state import CONFIG, Deps

NAMES = ("a", "b", "c", "d")
SYNC_S = 0.2  # each replica publishes its sums and reads the others' this often
CONVERSATION = "demo-conversation"


def run_demo_replicas(
    *, backends: str, requests: int, max_tokens: int | None, min_samples: int, out: str,
    replicas: int,
) -> int:
    """The demo with `replicas` proxies sharing one store, behind nginx."""
    tokens, edit_tokens = demo_tokens(backends, max_tokens)
    return asyncio.run(demo_replicas(backends, requests, tokens, min_samples,
                                     Path(out).resolve(), edit_tokens, replicas))


async def demo_replicas(backends: str, n: int, max_tokens: int, min_samples: int, out: Path,
                        edit_tokens: int, count: int) -> int:
    policy = demo_policy(out, backends, min_samples)
    stops: list[Stop] = []
    collects: dict[str, _Collect] = {}
    apps: dict[str, web.Application] = {}
    names: list[str] = []
    try:
        store = await asyncio.to_thread(start_redis, 0, out)
        stops.append(lambda: asyncio.to_thread(store.stop))
        print(f"redis-server on 127.0.0.1:{store.port} (pid {store.process.pid}), no persistence")
        specs, model = await _backends(backends, stops)
        names = [spec.name for spec in specs]
        for index, replica in enumerate(NAMES[:count]):
            # the first replica launches the instances (local), the others attach to them
            own = specs if index == 0 else [attached(spec) for spec in specs]
            config = replica_config(own, replica, store.url, policy, out)
            collects[replica] = _Collect()
            app = create_app(config, deps=Deps(sinks=(collects[replica],), explore=False))
            _, port, stop = await start_site(app, port=config.listen.port)
            stops.insert(0, stop)
            apps[replica] = app
            print(f"replica {replica} on 127.0.0.1:{port} ; decision log {config.log.path}")
        upstreams = [f"127.0.0.1:{app[CONFIG].listen.port}" for app in apps.values()]
        nginx = await asyncio.to_thread(start_nginx, upstreams, out / "nginx")
        stops.insert(0, lambda: asyncio.to_thread(nginx.stop))
        base_url = f"http://127.0.0.1:{nginx.port}/v1"
        print(f"nginx round robin on {base_url} (pid {nginx.process.pid}) in front of "
              + ", ".join(upstreams))
        items = requests_for(n, model=model, max_tokens=max_tokens, edit_tokens=edit_tokens)
        true_class = await _replay(base_url, items, names, f"measure the {len(names)} instances")
        for app in apps.values():  # each learns its own log; the store adds the other's
            app[LEARNER].learn_now(datetime.now(UTC))
            reload_once(app)
        await synced(apps)
        true_class |= await _replay(base_url, items, ("auto",), "route on auto (learned)")
        await synced(apps)
        learned = learned_lines(apps)
        turns = await conversation(base_url, model, collects, apps, max_tokens)
    finally:
        for stop in stops:
            await stop()
    records = [r for collect in collects.values() for r in collect.records]
    print()
    print(format_table(records, true_class, names))
    print("\nwhat each replica decides with (records of the route model's evidence):")
    print("\n".join(learned))
    print(f"\none conversation, {len(turns)} turns through nginx (x-specroute-conversation: "
          f"{CONVERSATION}):")
    print("\n".join(turns))
    stayed = len({line.split(" -> ")[1].split(",")[0] for line in turns}) == 1
    print("  the conversation stayed on its instance" if stayed
          else "  the conversation moved between instances")
    for replica, app in apps.items():
        print(f"  specroute tail {app[CONFIG].log.path}    # replica {replica}")
    return 0


def attached(spec: BackendSpec) -> BackendSpec:
    """The same instance, attached by URL (another replica launched it)."""
    return BackendSpec(name=spec.name, engine=spec.engine, profile=spec.profile,
                       speculation=spec.speculation, url=spec.base_url)


def replica_config(specs: Sequence[BackendSpec], replica: str, store: str, policy: Path,
                   out: Path) -> Config:
    port = free_loopback_port()
    return Config(
        listen={"host": "127.0.0.1", "port": port},
        backends=list(specs), policy=str(policy), learn={"interval_s": 0},
        pools={spec.name: [spec.name] for spec in specs},  # to pin each instance alone
        log=LogConfig(path=str(out / f"decisions-{replica}.jsonl")),
        supervisor=SupervisorConfig(log_dir=str(out / "backends")),
        replicas=ReplicasConfig(store=store, id=replica, namespace="demo",
                                sync_interval_s=SYNC_S, url=f"http://127.0.0.1:{port}"),
    )


def counted(sums: Sums) -> int:
    return int(sums.evidence.plain.n + sums.evidence.n_speculating)


def learned_counts(apps: Mapping[str, web.Application]) -> dict[str, tuple[int, int]]:
    """Per replica: (its own records, all it decides with)."""
    result = {}
    for replica, app in apps.items():
        online = app[ONLINE]
        evidence = online.model.evidence
        result[replica] = (counted(online.own_sums()),
                           int(evidence.plain.n + evidence.n_speculating))
    return result


async def synced(apps: Mapping[str, web.Application], timeout_s: float = 10.0) -> None:
    """Until every replica decides with every replica's records (bounded)."""
    for _ in range(int(timeout_s / 0.05)):
        counts = learned_counts(apps)
        everyone = sum(own for own, _ in counts.values())
        if all(total == everyone for _, total in counts.values()):
            return
        await asyncio.sleep(0.05)


def learned_lines(apps: Mapping[str, web.Application]) -> list[str]:
    counts = learned_counts(apps)
    lines = []
    for replica, (own, total) in counts.items():
        others = ", ".join(f"{name}'s {counts[name][0]}" for name in counts if name != replica)
        lines.append(f"  replica {replica}: {total} = its own {own} + {total - own} learned "
                     f"from the other ({others} published)")
    return lines


async def conversation(base_url: str, model: str, collects: Mapping[str, _Collect],
                       apps: Mapping[str, web.Application], max_tokens: int) -> list[str]:
    """Three turns on one conversation key, on `auto`: which replica served each (and which
    passed it there: the owner of an instance in its share serves what goes there), the
    instance it went to and how much of its prompt that instance had cached."""
    function = FUNCTIONS[0][0]
    messages: list[Any] = [  # the SDK's message params
        {"role": "system", "content": "You review Python code. The module under review:\n\n"
         + "\n\n".join(f[0] for f in FUNCTIONS)}]
    asks = [f"What does this function do?\n\n{function}", "Name one edge case it misses.",
            "Suggest a better name for it."]
    lines = []
    async with openai.AsyncOpenAI(base_url=base_url, api_key="demo", max_retries=0,
                                  timeout=600) as client:
        for turn, ask in enumerate(asks, 1):
            messages.append({"role": "user", "content": ask})
            before = {name: app[REPLICAS].passed_on.answered for name, app in apps.items()}
            raw = await client.chat.completions.with_raw_response.create(
                model=model, messages=messages, max_tokens=max_tokens, temperature=0,
                extra_headers={"x-specroute-conversation": CONVERSATION,
                               "x-specroute-route": "auto"})
            reply = raw.parse().choices[0].message.content or ""
            messages.append({"role": "assistant", "content": reply})
            request_id = raw.headers.get("x-specroute-request-id", "")
            replica, cached = await _served_by(collects, request_id)
            via = [name for name, app in apps.items()
                   if app[REPLICAS].passed_on.answered > before[name]]
            passed = f" (nginx gave it to {via[0]}, which passed it on)" if via else ""
            lines.append(f"  turn {turn}: replica {replica}{passed} -> "
                         f"{raw.headers.get('x-specroute-backend')}, {cached} prompt tokens "
                         "cached there")
    return lines


async def _served_by(collects: Mapping[str, _Collect], request_id: str) -> tuple[str, str]:
    """The replica whose log has the request, and the prompt tokens the engine had cached."""
    for _ in range(100):  # bounded: 5 s (a record is written after the answer's last byte)
        for replica, collect in collects.items():
            for record in collect.records:
                if record.request_id == request_id:
                    cached = record.outcome.cached_tokens
                    return replica, "?" if cached is None else str(cached)
        await asyncio.sleep(0.05)
    return "?", "?"
