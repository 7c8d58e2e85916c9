"""Does the learner find the faster instance per class, and how close does it get to an oracle?

    .venv/bin/python -m bench.learning gb10  [--pool 600] [--requests 4000]
    .venv/bin/python -m bench.learning local [--pool 60]  [--requests 3000] [--pair qwen]

Two backends: `gb10` starts two simulated engines (backends/local/simulator.py) paced by the GB10 cost
model, with per-class acceptance set so that the model gives the published speedups (agent
+9.4%, code +6.5%, technical +4.4%, prose -3.6%, Chinese chat -3.7%); `local` launches the
real llama.cpp pair from the cache (where speculation never pays on CPU).

1. Measure: every request of a pool of distinct mixed-workload requests is streamed once to each
   instance; decode time, tokens and draft counts come from the engine's own timings.
2. Replay: `--requests` requests drawn from the pool go through the real policy code (rules
   classifier, `decide` with exploration, `learn` re-run every `--relearn-every` requests on
   what was served so far); each is charged the measured decode time of the instance chosen.
   always-mtp, never-mtp and the per-request oracle are charged on the same sequence.

Prints decode throughput of each, specroute's share of the oracle, the gain over the best static
choice against the oracle's, and after how many requests the learner's routes stopped changing.
Bounded: --max-seconds of wall time for the measuring, a fixed number of replayed requests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

from backends.local.simulator import CostModel, SimState, create_sim_app
from bench.mixed_workload import BenchRequest, class_of, make_requests
from classifiers import rules
from classifiers.features import Features, extract
from classifiers.request_view import view_request
from classifiers.scores import Scores
from policies.decide import BackendState, decide
from policies.learn import Observation, learn
from policies.learned import EMPTY_STATE, LearnedState, acceptance_for_speedup
from policies.schema import Exploration, Policy
from router.serve import start_site

BACKENDS = (BackendState("mtp-0", "mtp"), BackendState("plain-0", "plain"))


@dataclass(frozen=True, slots=True)
class Arm:
    """One request served by one instance, as the engine reported it."""

    tokens: int
    decode_ms: float
    draft_n: int | None
    draft_accepted: int | None
    ttft_ms: float


@dataclass(frozen=True, slots=True)
class Measured:
    request: BenchRequest
    features: Features
    scores: Scores
    arms: dict[str, Arm]  # profile -> arm


# --- measuring ------------------------------------------------------------------------------


async def stream_once(session: aiohttp.ClientSession, url: str, body: dict[str, object]) -> Arm:
    """Stream one chat completion; the last chunk's llama.cpp-style timings give decode time."""
    started = time.perf_counter()
    first: float | None = None
    timings: dict[str, object] = {}
    async with session.post(f"{url}/v1/chat/completions", json={**body, "stream": True}) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk.get("choices"):
                first = time.perf_counter()
            timings = chunk.get("timings") or timings
    tokens = int(str(timings.get("predicted_n", 0)))
    if tokens < 2:
        raise RuntimeError(f"{url}: no decode timings in the stream ({timings})")
    return Arm(
        tokens=tokens,
        decode_ms=float(str(timings["predicted_ms"])),
        draft_n=_opt_int(timings.get("draft_n")),
        draft_accepted=_opt_int(timings.get("draft_n_accepted")),
        ttft_ms=((first or started) - started) * 1000,
    )


def _opt_int(value: object) -> int | None:
    return None if value is None else int(str(value))


async def measure_pool(
    requests: Sequence[BenchRequest], urls: dict[str, str], max_seconds: float
) -> list[Measured]:
    """Each request once on each instance (alternating which goes first)."""
    deadline = time.monotonic() + max_seconds
    out = []
    timeout = aiohttp.ClientTimeout(total=600)
    # a fresh connection per request: llama-server closes idle keep-alive connections
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        for url in urls.values():  # warm-up: page the weights in before anything is timed
            await stream_once(session, url, {**requests[0].body, "max_tokens": 8})
        for i, request in enumerate(requests):
            if time.monotonic() > deadline:
                print(f"  measuring stopped at the time limit after {i} requests", file=sys.stderr)
                break
            order = ("mtp", "plain") if i % 2 == 0 else ("plain", "mtp")
            arms = {p: await stream_once(session, urls[p], request.body) for p in order}
            view = view_request("chat", request.body)
            features = extract(view)
            out.append(Measured(request, features, rules.score(view, features), arms))
            if (i + 1) % (100 if len(requests) > 200 else 10) == 0:
                print(f"  measured {i + 1}/{len(requests)}", file=sys.stderr)
    return out


# --- replaying ------------------------------------------------------------------------------


@dataclass
class Totals:
    tokens: int = 0
    ms: float = 0.0

    def add(self, tokens: int, ms: float) -> None:
        self.tokens += tokens
        self.ms += ms

    @property
    def tps(self) -> float:
        return self.tokens / self.ms * 1000 if self.ms else 0.0


@dataclass
class ReplayResult:
    specroute: Totals
    always_mtp: Totals
    never_mtp: Totals
    oracle: Totals
    explored: int
    converged_after: int
    final: LearnedState
    routes: dict[str, str]  # true class/lang -> profile the learner ends up choosing


def replay(
    pool: Sequence[Measured], policy: Policy, requests: int, seed: int, relearn_every: int
) -> ReplayResult:
    rng = random.Random(seed)
    learned, observations = EMPTY_STATE, []
    totals = {name: Totals() for name in ("specroute", "always", "never", "oracle")}
    best = _best_per_class(pool)
    explored, last_wrong = 0, 0
    final_choice: dict[str, str] = {}
    order: list[Measured] = []
    for i in range(requests):
        if not order:
            order = list(pool)
            rng.shuffle(order)
        m = order.pop()
        d = decide(policy, m.features, m.scores, BACKENDS, learned=learned, draw=rng.random())
        arm = m.arms[d.profile]
        key = f"{m.request.cls}/{m.request.lang}"
        totals["specroute"].add(arm.tokens, arm.decode_ms)
        totals["always"].add(m.arms["mtp"].tokens, m.arms["mtp"].decode_ms)
        totals["never"].add(m.arms["plain"].tokens, m.arms["plain"].decode_ms)
        fastest = min(m.arms.values(), key=lambda a: a.decode_ms / a.tokens)
        totals["oracle"].add(fastest.tokens, fastest.decode_ms)
        explored += d.explored
        if not d.explored:
            final_choice[key] = d.profile
            if d.profile != best[key]:
                last_wrong = i + 1
        observations.append(_observation(m, d.profile, arm))
        if (i + 1) % relearn_every == 0:
            learned = learn(
                observations, min_samples=policy.exploration.min_samples, assume=policy.assume
            )
    return ReplayResult(
        totals["specroute"], totals["always"], totals["never"], totals["oracle"],
        explored, last_wrong, learned, final_choice,
    )


def _best_per_class(pool: Sequence[Measured]) -> dict[str, str]:
    """The faster instance for each true class over the whole pool (what a perfect per-class
    router would pick)."""
    sums: dict[str, dict[str, Totals]] = {}
    for m in pool:
        key = f"{m.request.cls}/{m.request.lang}"
        per = sums.setdefault(key, {"mtp": Totals(), "plain": Totals()})
        for profile, arm in m.arms.items():
            per[profile].add(arm.tokens, arm.decode_ms)
    return {key: max(per, key=lambda p: per[p].tps) for key, per in sums.items()}


def _observation(m: Measured, profile: str, arm: Arm) -> Observation:
    return Observation(
        cls=m.scores.top_class, lang=m.scores.lang, p_spec=m.scores.p_spec, profile=profile,
        completion_tokens=arm.tokens, decode_tps=arm.tokens / arm.decode_ms * 1000,
        draft_n=arm.draft_n if profile == "mtp" else None,
        draft_accepted=arm.draft_accepted if profile == "mtp" else None,
        prompt_tokens=m.features.prompt_tokens, ttft_ms=arm.ttft_ms,
        temperature=m.features.temperature,
        thinking=None if m.features.thinking_unset else m.features.thinking,
    )


# --- reporting ------------------------------------------------------------------------------


def report(name: str, pool: Sequence[Measured], result: ReplayResult, requests: int) -> bool:
    rows = [
        ("never-mtp", result.never_mtp), ("always-mtp", result.always_mtp),
        ("specroute", result.specroute), ("oracle", result.oracle),
    ]
    oracle = result.oracle.tps
    print(f"\n== {name}: {requests} requests replayed from a pool of {len(pool)} measured")
    for label, totals in rows:
        print(f"  {label:<11} {totals.tps:8.2f} tok/s decode  {totals.tps / oracle:7.2%} of oracle")
    best_static = max(result.never_mtp.tps, result.always_mtp.tps)
    gain_oracle = oracle / best_static - 1
    gain_ours = result.specroute.tps / best_static - 1
    share = result.specroute.tps / oracle
    g = gain_ours / gain_oracle if gain_oracle > 0 else float("nan")
    print(f"  oracle over best static: {gain_oracle:+.2%} (G); specroute over best static: "
          f"{gain_ours:+.2%} ({g:.2f} G)")
    print(f"  explored {result.explored} requests; routes stopped changing after "
          f"{result.converged_after} requests")
    print("  learned routes by true class: " + ", ".join(
        f"{k} -> {v}" for k, v in sorted(result.routes.items())))
    return share >= 0.98


def save_pool(pool: Sequence[Measured], path: str) -> None:
    """The measurements, one JSON object per request: the learner's view of both arms."""
    with open(path, "w", encoding="utf-8") as out:
        for m in pool:
            row = {
                "cls": m.scores.top_class, "lang": m.scores.lang, "p_spec": m.scores.p_spec,
                "true_class": m.request.cls, "true_lang": m.request.lang,
                "arms": {p: asdict(a) for p, a in sorted(m.arms.items())},
            }
            out.write(json.dumps(row, sort_keys=True) + "\n")


def load_pool(path: str) -> list[Measured]:
    """A pool saved by `save_pool`: the classifier's verdict and both arms per request."""
    pool = []
    with open(path, encoding="utf-8") as rows:
        for line in rows:
            row = json.loads(line)
            scores = Scores(row["cls"], row["lang"], {row["cls"]: 1.0}, row["p_spec"])
            request = BenchRequest(row["true_class"], row["true_lang"], {})
            arms = {p: Arm(**a) for p, a in row["arms"].items()}
            pool.append(Measured(request, row_features(), scores, arms))
    return pool


def row_features() -> Features:
    """Greedy, non-thinking, no tools: what every request of the mixed workload is."""
    view = view_request("chat", {"messages": [{"role": "user", "content": "x"}], "temperature": 0})
    return extract(view)


def bench_policy(rate: float, min_samples: int) -> Policy:
    return Policy(
        routes={c: "auto" for c in ("agent", "code", "technical", "prose", "chat")},
        exploration=Exploration(rate=rate, min_samples=min_samples),
    )


# --- the two backends -----------------------------------------------------------------------

GB10_SPEEDUP = {"agent": 1.094, "code": 1.065, "technical": 1.044, "prose": 0.964, "chat": 0.963}


@contextlib.asynccontextmanager
async def gb10_sims(speedups: dict[str, float]) -> AsyncIterator[dict[str, str]]:
    """Two simulated engines (mtp, plain) with the GB10 cost model and per-class acceptance
    giving `speedups`; nothing sleeps (time_scale 0): decode time is the cost model's, as the
    engine reports it in its timings. Yields profile -> base URL."""
    cost = CostModel(t_plain_ms=68.0, t_verify_ms=108.0, t_draft_ms=4.0, gate_skip=0.44)
    steps = (
        cost.t_plain_ms, cost.t_plain_ms + cost.t_draft_ms, cost.t_verify_ms + cost.t_draft_ms
    )
    share = 1 - cost.gate_skip
    acceptance = {cls: acceptance_for_speedup(s, share, *steps) for cls, s in speedups.items()}
    stops, urls = [], {}
    try:
        for profile in ("mtp", "plain"):
            state = SimState(profile=profile, cost=cost, acceptance=acceptance, reply_tokens=512,
                             class_of=class_of)
            _, port, stop = await start_site(create_sim_app(state))
            stops.append(stop)
            urls[profile] = f"http://127.0.0.1:{port}"
        yield urls
    finally:
        for stop in stops:
            await stop()


async def measure_gb10(pool_size: int, seed: int, max_seconds: float) -> list[Measured]:
    async with gb10_sims(GB10_SPEEDUP) as urls:
        return await measure_pool(make_requests(pool_size, seed), urls, max_seconds)


@contextlib.asynccontextmanager
async def local_pair(kind: str) -> AsyncIterator[dict[str, str]]:
    """The real llama.cpp pair from the cache, launched on free loopback ports by the
    supervisor and stopped by PID at the end. Yields profile -> base URL."""
    from backends.local.pair import local_pair_specs
    from backends.supervisor import Supervisor

    specs = local_pair_specs(kind)
    async with aiohttp.ClientSession() as session:
        supervisor = Supervisor(specs, Path("bench/out/local-pair-logs"), session=session)
        await supervisor.start()
        try:
            yield {spec.profile: spec.base_url for spec in specs}
        finally:
            await supervisor.stop()


def local_requests(pool_size: int, seed: int) -> list[BenchRequest]:
    """Shorter replies (CPU decoding is slow) and no prompt cache (outputs compare exactly)."""
    return [
        BenchRequest(r.cls, r.lang, {**r.body, "cache_prompt": False})
        for r in make_requests(pool_size, seed, max_tokens=(48, 96))
    ]


async def measure_local(pool_size: int, seed: int, max_seconds: float, kind: str) -> list[Measured]:
    async with local_pair(kind) as urls:
        return await measure_pool(local_requests(pool_size, seed), urls, max_seconds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("backend", choices=("gb10", "local"), help="which pair of instances")
    parser.add_argument("--pool", type=int, default=None,
                        help="distinct requests measured on both instances (gb10 600, local 60)")
    parser.add_argument("--requests", type=int, default=4000, help="requests replayed")
    parser.add_argument("--rate", type=float, default=0.05, help="exploration.rate")
    parser.add_argument("--min-samples", type=int, default=None,
                        help="exploration.min_samples (gb10 30, local 5)")
    parser.add_argument("--relearn-every", type=int, default=10,
                        help="re-run the learner after this many requests")
    parser.add_argument("--seed", type=int, default=7, help="workload and exploration seed")
    parser.add_argument("--pair", default="qwen", help="local pair kind (qwen | smollm2)")
    parser.add_argument("--max-seconds", type=float, default=1800.0,
                        help="wall-time bound on measuring (and on driving the router)")
    parser.add_argument("--save-pool", default=None,
                        help="write the measured pool (per request: class, p_spec, both arms) "
                             "as JSON lines to this file")
    parser.add_argument("--from-pool", default=None,
                        help="use a pool saved by --save-pool (same --pool and --seed) instead "
                             "of measuring")
    parser.add_argument("--through-router", action="store_true",
                        help="send the replay through the real router app, learning from its "
                             "decision log and hot-reloading, instead of calling decide")
    args = parser.parse_args(argv)
    gb10 = args.backend == "gb10"
    pool_size = args.pool or (600 if gb10 else 60)
    min_samples = args.min_samples or (30 if gb10 else 5)
    started = time.monotonic()
    policy = bench_policy(args.rate, min_samples)
    if args.through_router:
        from bench.learning_router import through_router

        pool, result = asyncio.run(through_router(
            gb10, args.pair, pool_size, policy, args.requests, args.seed, args.relearn_every,
            args.max_seconds, saved_pool=args.from_pool))
    elif args.from_pool:
        pool = load_pool(args.from_pool)
        result = replay(pool, policy, args.requests, args.seed, args.relearn_every)
    elif gb10:
        pool = asyncio.run(measure_gb10(pool_size, args.seed, args.max_seconds))
        result = replay(pool, policy, args.requests, args.seed, args.relearn_every)
    else:
        pool = asyncio.run(measure_local(pool_size, args.seed, args.max_seconds, args.pair))
        result = replay(pool, policy, args.requests, args.seed, args.relearn_every)
    measured_s = time.monotonic() - started
    if args.save_pool:
        save_pool(pool, args.save_pool)
    name = args.backend + (" through the router" if args.through_router else "")
    ok = report(name, pool, result, args.requests)
    print(f"  ({measured_s:.0f} s; exploration rate {args.rate}, min_samples "
          f"{min_samples}, relearn every {args.relearn_every})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
