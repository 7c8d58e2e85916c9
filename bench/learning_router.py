"""The learning benchmark through the real router: `python -m bench.learning gb10 --through-router`.

The same mixed workload, first measured directly on both simulated GB10 engines (the oracle's
table), then sent request by request through `router.app.create_app` (rules classifier,
`decide` with exploration, the decision log). Every `relearn_every` requests the learner reads
the router's decision log and writes the learned state next to the policy, as `specroute
learn` does; the router's store hot-reloads it. Each request is charged the decode time the
engine reported for the instance the router chose (bodies are sent unchanged, so the engine's
per-body pacing matches the direct measurement).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import yaml

from backends.spec import BackendSpec
from bench.learning import (
    GB10_SPEEDUP,
    Measured,
    ReplayResult,
    Totals,
    _best_per_class,
    gb10_sims,
    load_pool,
    local_pair,
    local_requests,
    measure_pool,
)
from bench.mixed_workload import BenchRequest, make_requests
from decisionlog.readers import read_records
from policies.learned import LearnedState
from policies.observation import observations
from policies.schema import Policy
from policies.store import learn_to_file, learned_path_for
from router.app import create_app
from router.config import Config, LearnConfig, LogConfig
from router.serve import start_site
from router.state import POLICY, Deps


async def through_router(
    gb10: bool, pair: str, pool_size: int, policy: Policy, requests: int, seed: int,
    relearn_every: int, max_seconds: float, saved_pool: str | None = None,
) -> tuple[list[Measured], ReplayResult]:
    """Measure the pool on both instances (or take a pool saved from the same workload and
    seed), then drive the router with it (bounded in time)."""
    backends = gb10_sims(GB10_SPEEDUP) if gb10 else local_pair(pair)
    made = make_requests(pool_size, seed) if gb10 else local_requests(pool_size, seed)
    bodies = [
        BenchRequest(r.cls, r.lang, {**r.body, "stream_options": {"include_usage": True}})
        for r in made
    ]
    async with backends as urls:
        if saved_pool:
            pool = _with_bodies(load_pool(saved_pool), bodies)
        else:
            pool = await measure_pool(bodies, urls, max_seconds)
        with tempfile.TemporaryDirectory(prefix="specroute-bench-") as tmp:
            result = await _drive(pool, urls, policy, Path(tmp), requests, seed, relearn_every,
                                  max_seconds)
    return pool, result


def _with_bodies(pool: Sequence[Measured], bodies: Sequence[BenchRequest]) -> list[Measured]:
    """A saved pool with the request bodies it was measured on, regenerated from the seed."""
    if len(pool) != len(bodies) or any(
        m.request.cls != b.cls for m, b in zip(pool, bodies, strict=True)
    ):
        raise ValueError("the saved pool was not measured on this workload (--pool, --seed)")
    return [dataclasses.replace(m, request=b) for m, b in zip(pool, bodies, strict=True)]


async def _drive(
    pool: Sequence[Measured], urls: dict[str, str], policy: Policy, tmp: Path, requests: int,
    seed: int, relearn_every: int, max_seconds: float,
) -> ReplayResult:
    policy_path = tmp / "policy.yaml"
    policy_path.write_text(yaml.safe_dump(policy.model_dump(mode="json")), encoding="utf-8")
    log_path = tmp / "decisions.jsonl"
    config = Config(
        backends=[BackendSpec(name=f"{p}-0", profile=p, url=urls[p]) for p in ("mtp", "plain")],
        policy=str(policy_path), tokenizer=False, log=LogConfig(path=str(log_path)),
        learn=LearnConfig(interval_s=0),  # the bench relearns itself, every relearn_every
    )
    rng = random.Random(seed)
    app = create_app(config, deps=Deps(random=random.Random(seed + 1).random,
                                       reload_interval_s=0.02))
    _, port, stop = await start_site(app)
    sent: list[tuple[Measured, str, str]] = []
    deadline = time.monotonic() + max_seconds
    try:
        async with aiohttp.ClientSession() as session:
            order: list[Measured] = []
            for i in range(requests):
                if time.monotonic() > deadline:
                    print(f"  stopped at the time limit after {i} requests")
                    break
                if not order:
                    order = list(pool)
                    rng.shuffle(order)
                m = order.pop()
                profile, request_id = await _send(session, port, m, i)
                sent.append((m, profile, request_id))
                if (i + 1) % relearn_every == 0:
                    await _relearn(app, log_path, policy, policy_path, f"after {i + 1}")
    finally:
        await stop()
    kept = Path("bench/out/learning-router-decisions.jsonl")
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(log_path, kept)
    print(f"  the router's decision log is kept in {kept}")
    return _account(pool, sent, _explored_requests(log_path), app[POLICY].learned)


def _explored_requests(log_path: Path) -> set[str]:
    """Request ids the router routed against its belief, from its decision log."""
    ids = set()
    for line in log_path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("decision", {}).get("explored"):
            ids.add(str(record["request_id"]))
    return ids


def _account(
    pool: Sequence[Measured], sent: Sequence[tuple[Measured, str, str]], explored_ids: set[str],
    learned: LearnedState,
) -> ReplayResult:
    totals = {name: Totals() for name in ("specroute", "always", "never", "oracle")}
    best, choice = _best_per_class(pool), {}
    explored = last_wrong = 0
    for i, (m, profile, request_id) in enumerate(sent):
        arm = m.arms[profile]
        totals["specroute"].add(arm.tokens, arm.decode_ms)
        totals["always"].add(m.arms["mtp"].tokens, m.arms["mtp"].decode_ms)
        totals["never"].add(m.arms["plain"].tokens, m.arms["plain"].decode_ms)
        fastest = min(m.arms.values(), key=lambda a: a.decode_ms / a.tokens)
        totals["oracle"].add(fastest.tokens, fastest.decode_ms)
        key = f"{m.request.cls}/{m.request.lang}"
        if request_id in explored_ids:
            explored += 1
            continue
        choice[key] = profile
        if profile != best[key]:
            last_wrong = i + 1
    return ReplayResult(
        totals["specroute"], totals["always"], totals["never"], totals["oracle"],
        explored, last_wrong, learned, choice,
    )


async def _send(
    session: aiohttp.ClientSession, port: int, m: Measured, index: int
) -> tuple[str, str]:
    """Stream one request through the proxy; (served profile, request id). Each request is its
    own conversation: the pool's bodies recur, and stickiness is not what is measured here."""
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    headers = {"x-specroute-conversation": f"bench-{index}"}
    body = {**m.request.body, "stream": True}
    async with session.post(url, json=body, headers=headers) as response:
        response.raise_for_status()
        async for _ in response.content:
            pass
        return response.headers["x-specroute-profile"], response.headers["x-specroute-request-id"]


async def _relearn(
    app: object, log_path: Path, policy: Policy, policy_path: Path, created: str
) -> None:
    """What `specroute learn LOG` does, then wait (bounded) until the router has reloaded it."""
    records = read_records([log_path])
    learn_to_file(observations(records), policy, learned_path_for(policy_path), created=created)
    store = app[POLICY]  # type: ignore[index]
    for _ in range(100):
        if store.learned.created == created:
            return
        await asyncio.sleep(0.01)
    raise RuntimeError("the router did not reload the learned state within a second")
