"""Replicas behind nginx: 2 specroute processes sharing one Redis, against nginx `least_conn`
and one specroute, and the proxy's own capacity with 1 and 2 replicas, side by side in one run.

    .venv/bin/python -m bench.replicas [--mixes balanced agent-heavy] [--requests 80]
                                       [--clients 4 8] [--utilisation 0.8] [--time-scale 0.1]
                                       [--load-interval 0.1] [--skip-kill] [--skip-capacity]

Routing: 2 simulated pairs (4 instances: `simulator.MACHINES[--machine]`, serial, paced at
`--time-scale` of real time, in this process, showing llama.cpp's queue gauges on /metrics)
and in front of them, in turn on the same request sequence (`bench.traffic` mixes) and load
(`--rounds` times, the order reversed every other round; the rounds merged are what is judged):

- `least_conn`: Debian's nginx with `least_conn` straight over the 4 instances;
- `single`: one `specroute serve` process over the 4 (no store);
- `2 replicas`: 2 `specroute serve` processes (`replicas.store`: a redis-server of their own,
  shared) behind nginx round robin;
- `killed`: the same, with the redis-server killed (SIGKILL) once the instances have received
  half of the run's requests.

Every specroute is a separate process (`python -m router serve`, as an operator runs it), from
a cold start (the shipped policy and classifier, its prior, the startup probe), engine
`llamacpp`, defaults otherwise (sync every 1 s, gauges every 0.1 s). Loads: closed loop
(`--clients`, each sends its next request when the last one is answered; completion tokens over
wall time) and open loop (Poisson arrivals at `--utilisation` of the 4 instances' plain
capacity; mean latency). Beside each figure, the share of the run during which an instance
sat idle while a request waited on another (sampled every 5 ms from the simulated engines).
After each `2 replicas` run, with the traffic stopped and two sync rounds waited, each
replica's route model (its `/dashboard/data.json` status: posterior means and sds, paces,
counts) is compared with a model built from the union of both decision logs, and its learned
chance of colliding with the other replica is read from its /metrics
(`specroute_replica_collision_risk`).

Capacity (run first: it wants every core, the routing runs are paced): req/s at
`--capacity-clients` of 1 and 2 replicas behind nginx (round robin, keepalive) against one fast
fake upstream (`bench.proxy_overhead`'s), the two set-ups alternated, best of
`--capacity-rounds`; with the CPU each process spent per request, the cores they used, how busy
the whole machine was, and from those costs what this machine's cores allow.

Targets (PASS/MISS each; exit 1 when one is missed): `2 replicas` >= 0.98 x `least_conn` closed
loop and >= 1.0 x open loop (latency), >= 0.99 x `single`; each replica's model equal to the
union's (counts equal, figures within 1e-9); `killed`: 0 failed requests and >= 0.98 x
`2 replicas`; capacity: 2 replicas >= 1.8 x one where the cores allow (N/A where they do not,
with what they allowed). Every server is on 127.0.0.1 on a free port, stopped by its PID;
without nginx or redis-server the run says so and stops.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp

from backends.local.redisserver import RedisServer, redis_binary, start_redis
from backends.local.simulator import MACHINES, SimState, create_sim_app, decode_plan
from backends.spec import BackendSpec
from backends.stats import parse_sample
from bench.learning import poisson_arrivals
from bench.learning_live import REQUEST_ERRORS, closed_loop, completion_tokens, nginx_conf
from bench.machines import POLICY_PATH, machine_states
from bench.proxy_overhead import (
    Target,
    children,
    cpu_seconds,
    free_port,
    make_body,
    spawn,
    stop,
    throughput,
    wait_ready,
)
from bench.traffic import MIXES, TrafficRequest, make_mix
from decisionlog.readers import iter_log_records
from policies import PolicyStore, RouteModel, observations
from policies.learner.routemodel import gather
from router.config import (
    Config,
    LearnConfig,
    LoadConfig,
    LogConfig,
    ReplicasConfig,
    SupervisorConfig,
)
from router.learning.online import model_status
from router.serve import start_site

SETUPS: Final = ("least_conn", "single", "2 replicas", "killed")
DEFAULT_MIXES: Final = ("balanced", "agent-heavy")  # a few minutes; --mixes for the others
CLOSED_FLOOR: Final = 0.98  # 2 replicas / least_conn, closed loop
OPEN_FLOOR: Final = 1.0  # least_conn's mean latency / 2 replicas'
SINGLE_FLOOR: Final = 0.99  # 2 replicas / single
KILL_FLOOR: Final = 0.98  # killed / 2 replicas
UNION_TOLERANCE: Final = 1e-9
CAPACITY_TARGET: Final = 1.8
SYNC_INTERVAL_S: Final = ReplicasConfig().sync_interval_s


# --- what is measured -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Load:
    name: str
    clients: int = 0  # closed loop
    arrivals_s: tuple[float, ...] = ()  # open loop: send times from the start

    @property
    def closed(self) -> bool:
        return self.clients > 0


@dataclass(slots=True)
class Result:
    closed: bool
    tokens: int = 0
    seconds: float = math.nan
    latency_s: float = math.nan  # mean, open loop
    failures: list[str] = field(default_factory=list)
    note: str = ""
    idle_queued: float = math.nan  # share of the run with an instance idle and a request queued
    unsent: int = 0  # requests the wall-time bound kept from being sent: the run is not judged

    @property
    def score(self) -> float:
        """Higher is better: tokens per second closed loop, 1 / mean latency open loop."""
        return self.tokens / self.seconds if self.closed else 1.0 / self.latency_s

    def cell(self) -> str:
        return (f"{self.tokens / self.seconds:.1f} tok/s" if self.closed
                else f"{self.latency_s * 1000:.0f} ms")


@dataclass(frozen=True, slots=True)
class Check:
    what: str
    measured: str
    ok: bool | None  # None: not applicable on this machine


@dataclass(slots=True)
class Row:
    mix: str
    load: Load
    results: dict[str, Result] = field(default_factory=dict)
    union_delta: float = math.nan
    union_n: str = ""
    risks: list[float] = field(default_factory=list)  # each replica's learned collision risk
    passed: dict[str, int] = field(default_factory=dict)  # requests passed on, by result
    rounds: list[dict[str, Result]] = field(default_factory=list)  # `results` merges them

    def ratio(self, ours: str, theirs: str) -> float:
        return self.results[ours].score / self.results[theirs].score

    def ratio_cell(self, ours: str, theirs: str) -> str:
        """The ratio of the merged rounds, and with several rounds its range over them (what
        the machine's noise moves it by)."""
        cell = f"{self.ratio(ours, theirs):.3f}"
        if len(self.rounds) < 2:
            return cell
        each = [r[ours].score / r[theirs].score for r in self.rounds]
        return f"{cell} ({min(each):.3f}-{max(each):.3f})"


def merged(results: Sequence[Result]) -> Result:
    """One set-up's rounds as one result: closed loop all tokens over all seconds, open loop
    the mean latency over the rounds (each sends the same requests)."""
    return Result(results[0].closed, tokens=sum(r.tokens for r in results),
                  seconds=sum(r.seconds for r in results),
                  latency_s=statistics.fmean(r.latency_s for r in results),
                  failures=[f for r in results for f in r.failures],
                  note="; ".join(dict.fromkeys(r.note for r in results if r.note)),
                  idle_queued=statistics.fmean(r.idle_queued for r in results))


@dataclass
class Bench:
    """What every routing run shares: the instances, nginx least_conn over them, the bounds."""

    args: argparse.Namespace
    work: Path
    nginx: str
    states: dict[str, SimState]  # instance name -> its simulated engine
    specs: list[BackendSpec]
    lc_url: str = ""
    deadline: float = math.inf
    _runs: Iterator[int] = field(default_factory=itertools.count)
    cut: list[str] = field(default_factory=list)  # rounds the wall-time bound cut short

    @property
    def load_config(self) -> LoadConfig:
        """The engines' gauges as every specroute of the routing runs reads them."""
        return LoadConfig(interval_s=self.args.load_interval)

    def run_dir(self, kind: str) -> Path:
        """A fresh directory with its own copy of the shipped policy: every run starts cold."""
        path = self.work / f"{next(self._runs):03d}-{kind.replace(' ', '-')}"
        path.mkdir()
        (path / "policy.yaml").write_text(POLICY_PATH.read_text(encoding="utf-8"),
                                          encoding="utf-8")
        return path


# --- processes --------------------------------------------------------------------------------


@dataclass
class Proxy:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path  # its decision log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def start_proxy(work: Path, name: str, specs: Sequence[BackendSpec], *, store: str = "",
                      tokenizer: bool = False, probe: bool = True,
                      load: LoadConfig | None = None, pass_on: bool = True,
                      sync_s: float = SYNC_INTERVAL_S) -> Proxy:
    """`specroute serve` in its own process, returned once /readyz answers (and, with a store,
    once the store is reached). With a store and `pass_on`, its `replicas.url` is set: the
    replicas pass a request for a free instance in another's share to that replica."""
    port = free_port()
    config = Config(
        backends=list(specs), policy=str(work / "policy.yaml"), tokenizer=tokenizer,
        classifier="default", log=LogConfig(path=str(work / f"{name}.jsonl")),
        learn=LearnConfig(interval_s=0),
        supervisor=SupervisorConfig(log_dir=str(work / f"{name}-backends"), startup_probe=probe),
        replicas=ReplicasConfig(store=store, id=name, sync_interval_s=sync_s,
                                url=f"http://127.0.0.1:{port}" if store and pass_on else ""),
        load=load or LoadConfig(),
    )
    path = work / f"{name}.yaml"
    path.write_text(json.dumps(config.model_dump(mode="json")), encoding="utf-8")  # JSON is YAML
    process = spawn([sys.executable, "-m", "router", "serve", "--config", str(path),
                     "--port", str(port)], work / f"{name}.stderr")
    proxy = Proxy(name, port, process, work / f"{name}.jsonl")
    try:
        await _await_ready(proxy, work / f"{name}.stderr", with_store=bool(store))
    except BaseException:
        stop(process)
        raise
    return proxy


async def _await_ready(proxy: Proxy, stderr: Path, *, with_store: bool) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(600):  # bounded: 60 s
            if proxy.process.poll() is not None:
                raise RuntimeError(f"{proxy.name} exited: {stderr.read_text()[-2000:]}")
            try:
                async with session.get(proxy.url + "/readyz") as response:
                    ready = await response.json()
                    if response.status == 200 and (not with_store
                                                   or ready["store"]["state"] == "ok"):
                        return
            except (aiohttp.ClientError, ValueError):
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{proxy.name} was not ready within 60 s")


async def start_nginx(binary: str, work: Path, upstream_ports: Sequence[int], *,
                      balance: str = "least_conn", keepalive: int = 0
                      ) -> tuple[subprocess.Popen[bytes], int]:
    """nginx over `upstream_ports` with a config written to `work` (its own session: stopped
    by its PID with its worker)."""
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = work / "nginx.conf"
    conf.write_text(nginx_conf(work, port, upstream_ports, balance, keepalive), encoding="utf-8")
    process = spawn([binary, "-c", str(conf), "-p", str(work)], work / "nginx.stderr")
    for _ in range(200):  # bounded: 10 s
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited: {(work / 'nginx.stderr').read_text()[-2000:]}")
        if _listening(port):
            return process, port
        await asyncio.sleep(0.05)
    stop(process)
    raise RuntimeError("nginx did not listen within 10 s")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


async def stopped(*processes: subprocess.Popen[bytes] | None) -> None:
    """Stop each by its PID, off the event loop (the simulated engines live on it)."""
    for process in processes:
        await asyncio.to_thread(stop, process)


# --- load ---------------------------------------------------------------------------------------


async def open_loop(base_url: str, requests: Sequence[TrafficRequest],
                    arrivals_s: Sequence[float], deadline: float, failures: list[str]
                    ) -> tuple[int, float, float]:
    """(completion tokens, wall seconds, mean latency seconds) with each request sent at its
    arrival time whatever the answers' pace; failures are noted, not raised."""
    tokens, latencies = 0, []
    started = time.monotonic()

    async def one(session: aiohttp.ClientSession, body: dict[str, Any], at: float) -> None:
        nonlocal tokens
        await asyncio.sleep(max(0.0, started + at - time.monotonic()))
        if time.monotonic() > deadline:
            return
        sent = time.monotonic()
        try:
            got = await completion_tokens(session, base_url, body)
        except REQUEST_ERRORS as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
            return
        tokens += got
        latencies.append(time.monotonic() - sent)

    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout,
                                     connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(one(session, r.body, at)
                               for r, at in zip(requests, arrivals_s, strict=True)))
    mean = statistics.fmean(latencies) if latencies else math.nan
    return tokens, time.monotonic() - started, mean


async def drive(bench: Bench, url: str, requests: Sequence[TrafficRequest], load: Load
                ) -> Result:
    result = Result(load.closed)
    done = asyncio.Event()
    watcher = asyncio.create_task(idle_while_queued(bench.states, done))
    before = received(bench.states)
    try:
        if load.closed:
            result.tokens, result.seconds = await closed_loop(
                url, requests, load.clients, bench.deadline, result.failures)
        else:
            result.tokens, result.seconds, result.latency_s = await open_loop(
                url, requests, load.arrivals_s, bench.deadline, result.failures)
    finally:
        done.set()
        result.idle_queued = await watcher
    # the engines fail none here: what they did not receive was never sent (the wall-time bound)
    result.unsent = max(0, len(requests) - (received(bench.states) - before))
    return result


async def idle_while_queued(states: Mapping[str, SimState], done: asyncio.Event) -> float:
    """The share of the run during which an instance was idle while a request waited on
    another: what a load balancer that saw everything would not have let happen."""
    samples = wasted = 0
    while not done.is_set():
        idle = any(s.inflight == 0 for s in states.values())
        waiting = any(s.inflight > s.serving for s in states.values())  # serial: in the queue
        samples += 1
        wasted += idle and waiting
        await asyncio.sleep(0.005)
    return wasted / samples if samples else math.nan


def open_arrivals(requests: Sequence[TrafficRequest], states: Mapping[str, SimState],
                  utilisation: float, seed: int) -> tuple[float, ...]:
    """Poisson arrivals (seconds) at `utilisation` of the instances' capacity at plain pace."""
    plain = next(s for s in states.values() if s.profile == "plain")
    mean_s = statistics.fmean(decode_plan(plain, r.body).total_s for r in requests)
    rate = utilisation * len(states) / (mean_s * plain.time_scale)
    # poisson_arrivals is unit-free: a rate per second gives seconds
    return tuple(poisson_arrivals(len(requests), rate, seed))


def received(states: Mapping[str, SimState]) -> int:
    return sum(len(s.received) for s in states.values())


# --- the routing runs ---------------------------------------------------------------------------


async def start_instances(machine: str, time_scale: float
                          ) -> tuple[dict[str, SimState], list[BackendSpec],
                                     list[Callable[[], Awaitable[None]]]]:
    """2 simulated pairs on this event loop: mtp-0, plain-0, mtp-1, plain-1."""
    states, specs, stops = {}, [], []
    for pair in range(2):
        for profile, state in machine_states(machine).items():
            state.time_scale = time_scale
            _, port, stop_site = await start_site(create_sim_app(state))
            name = f"{profile}-{pair}"
            states[name] = state
            specs.append(BackendSpec(name=name, engine="llamacpp", profile=profile,
                                     url=f"http://127.0.0.1:{port}"))
            stops.append(stop_site)
    return states, specs, stops


async def run_single(bench: Bench, requests: Sequence[TrafficRequest], load: Load) -> Result:
    work = bench.run_dir("single")
    proxy = await start_proxy(work, "single", bench.specs, load=bench.load_config)
    try:
        return await drive(bench, proxy.url, requests, load)
    finally:
        await stopped(proxy.process)


async def run_replicas(bench: Bench, requests: Sequence[TrafficRequest], load: Load, row: Row,
                       *, kill: bool) -> Result:
    """2 replicas sharing a fresh redis-server, behind nginx round robin; with `kill`, the
    store is killed halfway. Without, each replica's model is compared with the union's."""
    work = bench.run_dir("killed" if kill else "replicas")
    store = await asyncio.to_thread(start_redis)
    proxies: list[Proxy] = []
    nginx: subprocess.Popen[bytes] | None = None
    statuses: list[dict[str, Any]] = []
    killer: asyncio.Task[int] | None = None
    try:
        for name in ("a", "b"):  # one after the other: their startup probes do not collide
            proxies.append(await start_proxy(work, name, bench.specs, store=store.url,
                                             load=bench.load_config,
                                             pass_on=not bench.args.no_pass_on,
                                             sync_s=bench.args.sync_interval))
        nginx, port = await start_nginx(bench.nginx, work / "nginx",
                                        [p.port for p in proxies], balance="")
        if kill:
            killer = asyncio.create_task(kill_halfway(store, bench.states, len(requests)))
        result = await drive(bench, f"http://127.0.0.1:{port}", requests, load)
        if killer is not None:
            result.note = _killed_at(killer)
        else:  # two sync rounds: each has published its last sums and read the other's
            await asyncio.sleep(2 * bench.args.sync_interval + 0.5)
            statuses = [await replica_status(p) for p in proxies]
            measured = [await collision_risk(p) for p in proxies]
            row.risks = [risk for risk, _ in measured]  # the last round's
            for _, passed in measured:  # every round's
                for how, n in passed.items():
                    row.passed[how] = row.passed.get(how, 0) + n
    finally:
        if killer is not None:
            killer.cancel()  # when the run ended first (a deadline, an error)
        await stopped(nginx, *(p.process for p in proxies))
        await asyncio.to_thread(store.stop)
    if statuses:  # the logs are complete once the replicas have stopped
        union = union_status(work / "policy.yaml", [p.log for p in proxies])
        delta = max(status_delta(s, union) for s in statuses)  # the worst of the rounds
        row.union_delta = delta if math.isnan(row.union_delta) else max(row.union_delta, delta)
        row.union_n = (f"{union['observations']} greedy mtp, {union['sampled']['n']} sampled, "
                       f"{union['pace']['plain']['n']} plain")
    return result


async def kill_halfway(store: RedisServer, states: Mapping[str, SimState], n: int) -> int:
    """SIGKILL the store once the instances have received half of the run's `n` requests."""
    start = received(states)
    while received(states) - start < n // 2:
        await asyncio.sleep(0.005)
    await asyncio.to_thread(store.stop, signal.SIGKILL)
    return received(states) - start


def _killed_at(killer: asyncio.Task[int]) -> str:
    if not killer.done():  # the run ended first (a deadline)
        return "store never killed"
    return f"store killed after {killer.result()} requests"


async def replica_status(proxy: Proxy) -> dict[str, Any]:
    """The route model in force in a replica, as its dashboard reads it."""
    async with aiohttp.ClientSession() as session, session.get(
            proxy.url + "/dashboard/data.json") as response:
        response.raise_for_status()
        return dict((await response.json())["speedup_model"])


async def collision_risk(proxy: Proxy) -> tuple[float, dict[str, int]]:
    """The chance of meeting the other replica's request that a replica learned, and the
    requests it passed on, by result (answered, declined, not taken), from its /metrics."""
    async with aiohttp.ClientSession() as session, session.get(
            proxy.url + "/metrics") as response:
        response.raise_for_status()
        text = await response.text()
    samples = dict(s for s in map(parse_sample, text.splitlines()) if s is not None)
    passed: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith(PASSED_ON) and (sample := parse_sample(line)) is not None:
            passed[line[len(PASSED_ON):].split('"', 1)[0]] = int(sample[1])
    return samples.get("specroute_replica_collision_risk", math.nan), passed


PASSED_ON: Final = 'specroute_replica_passed_on_total{result="'


def union_status(policy: Path, logs: Sequence[Path]) -> dict[str, Any]:
    """The route model one process would hold with every record of `logs` (the startup probes'
    included), as the dashboard shows it (no NaN in JSON: null)."""
    snapshot = PolicyStore(policy, None, now=time.monotonic()).snapshot
    obs = list(observations(iter_log_records(logs)))
    status = model_status(RouteModel(snapshot.prior, gather(obs, snapshot.policy.assume)))
    return dict(json.loads(json.dumps(_finite(status))))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _leaves(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _leaves(inner, f"{path}[{index}]")
    else:
        yield path, value


def status_delta(ours: Mapping[str, Any], union: Mapping[str, Any]) -> float:
    """The largest difference between two model statuses, relative to each figure's size
    (inf when a key, a count's type or a label differs)."""
    a, b = dict(_leaves(ours)), dict(_leaves(union))
    if a.keys() != b.keys():
        return math.inf
    worst = 0.0
    for key, x in a.items():
        y = b[key]
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y))
        if numbers:
            worst = max(worst, abs(x - y) / max(1.0, abs(x), abs(y)))
        elif x != y:
            return math.inf
    return worst


async def routing_row(bench: Bench, mix: str, requests: Sequence[TrafficRequest], load: Load
                      ) -> Row:
    """Each set-up in turn, `--rounds` times, the order reversed every other round (a drift
    in the machine's speed then weighs on each set-up alike)."""
    row = Row(mix, load)
    setups = [s for s in SETUPS if s != "killed" or not bench.args.skip_kill]
    for turn in range(bench.args.rounds):
        results: dict[str, Result] = {}
        for setup in setups if turn % 2 == 0 else setups[::-1]:
            results[setup] = await run_setup(bench, setup, requests, load, row)
        if any(r.unsent for r in results.values()):  # a round cut short is not judged
            bench.cut.append(f"{row.mix}, {load.name}, round {turn + 1}")
            print(f"  (wall-time bound reached: {bench.cut[-1]} cut short, not counted)")
            break
        row.rounds.append(results)
    row.results = {s: merged([r[s] for r in row.rounds]) for s in setups} if row.rounds else {}
    return row


async def run_setup(bench: Bench, setup: str, requests: Sequence[TrafficRequest], load: Load,
                    row: Row) -> Result:
    if setup == "least_conn":
        return await drive(bench, bench.lc_url, requests, load)
    if setup == "single":
        return await run_single(bench, requests, load)
    return await run_replicas(bench, requests, load, row, kill=setup == "killed")


def row_checks(row: Row) -> list[Check]:
    where = f"{row.mix}, {row.load.name}"
    floor = CLOSED_FLOOR if row.load.closed else OPEN_FLOOR
    lc, single = row.ratio("2 replicas", "least_conn"), row.ratio("2 replicas", "single")
    checks = [
        Check(f"{where}: 2 replicas / least_conn >= {floor:g}", f"{lc:.3f}", lc >= floor),
        Check(f"{where}: 2 replicas / single >= {SINGLE_FLOOR:g}", f"{single:.3f}",
              single >= SINGLE_FLOOR),
        Check(f"{where}: each replica's model = the union's (within {UNION_TOLERANCE:g})",
              f"{row.union_delta:.1e} ({row.union_n})", row.union_delta <= UNION_TOLERANCE),
    ]
    if "killed" in row.results:
        killed = row.ratio("killed", "2 replicas")
        failed = len(row.results["killed"].failures)
        checks += [
            Check(f"{where}: store killed: 0 failed requests", f"{failed}", failed == 0),
            Check(f"{where}: store killed / 2 replicas >= {KILL_FLOOR:g}", f"{killed:.3f}",
                  killed >= KILL_FLOOR),
        ]
    for name, result in row.results.items():
        if result.failures and name != "killed":
            checks.append(Check(f"{where}: {name}: 0 failed requests", str(len(result.failures)),
                                False))
    return checks


def print_row(row: Row) -> None:
    cells = [f"{row.results[s].cell():>13}" if s in row.results else f"{'-':>13}"
             for s in SETUPS]
    ratios = [row.ratio_cell("2 replicas", "least_conn"), row.ratio_cell("2 replicas", "single")]
    killed = row.results.get("killed")
    kill = (f"{row.ratio_cell('killed', '2 replicas')} {len(killed.failures):3d} failed "
            f"({killed.note})" if killed is not None else "")
    print(f"  {row.load.name:<10} {' '.join(cells)}   {' '.join(ratios)}  union "
          f"{row.union_delta:.0e}  idle {_idle(row)}  risk {_risks(row)}  passed {_passed(row)}  "
          f"{kill}", flush=True)
    for result in row.results.values():
        for failure in result.failures[:3]:
            print(f"    failed: {failure}")


def _idle(row: Row) -> str:
    """Each set-up's share of the run with an instance idle while a request was queued."""
    return " / ".join(f"{row.results[s].idle_queued:.0%}" for s in SETUPS if s in row.results)


def _risks(row: Row) -> str:
    return " / ".join(f"{r:.2f}" for r in row.risks) or "-"


def _passed(row: Row) -> str:
    """Requests the replicas passed to each other, all rounds: answered by the owner /
    declined (its share busy: placed by the sender) / not taken (sent from the sender)."""
    return " / ".join(str(row.passed.get(r, 0)) for r in ("answered", "declined", "not_taken"))


def markdown_table(rows: Sequence[Row]) -> str:
    head = ("| mix | load | least_conn | single | 2 replicas | store killed | 2r / lc | "
            "2r / single | killed / 2r | failed (killed) | union max rel. diff | idle while "
            "queued (lc / single / 2r / killed) | collision risk (a / b) | passed on (answered / "
            "declined / not taken) |")
    lines = [head, "|" + "---|" * 14]
    for row in rows:
        killed = row.results.get("killed")
        cells = [row.mix, row.load.name,
                 *(row.results[s].cell() if s in row.results else "-" for s in SETUPS),
                 row.ratio_cell("2 replicas", "least_conn"),
                 row.ratio_cell("2 replicas", "single"),
                 row.ratio_cell("killed", "2 replicas") if killed else "-",
                 str(len(killed.failures)) if killed else "-", f"{row.union_delta:.0e}",
                 _idle(row), _risks(row), _passed(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def routing(args: argparse.Namespace, work: Path, nginx: str, deadline: float
                  ) -> tuple[list[Row], list[Check]]:
    states, specs, stops = await start_instances(args.machine, args.time_scale)
    bench = Bench(args, work, nginx, states, specs, deadline=deadline)
    lc: subprocess.Popen[bytes] | None = None
    rows: list[Row] = []
    try:
        ports = [int(urlsplit(s.base_url).port or 0) for s in specs]
        lc, lc_port = await start_nginx(nginx, work / "least_conn", ports)
        bench.lc_url = f"http://127.0.0.1:{lc_port}"
        print(f"\nRouting: 2 pairs of simulated {args.machine} instances (serial, {args.time_scale}"
              f"x real time), {args.requests} requests per run, seed {args.seed}, gauges read "
              f"every {args.load_interval:g} s; closed loop: completion tokens / wall s; open "
              "loop: mean latency")
        print(f"  {'load':<10} " + " ".join(f"{s:>13}" for s in SETUPS)
              + "    2r/lc 2r/single  union   idle while queued   killed/2r")
        for mix in args.mixes:
            print(f"== {mix}")
            requests = make_mix(mix, args.requests, args.seed)
            for load in loads(args, requests, states):
                if time.monotonic() > deadline:
                    bench.cut.append(f"{mix}, {load.name} and after: not run")
                    break
                row = await routing_row(bench, mix, requests, load)
                if not row.rounds:
                    break
                rows.append(row)
                print_row(row)
            if bench.cut:
                break
    finally:
        await stopped(lc)
        for stop_site in stops:
            await stop_site()
    bound = Check(f"every round run to the end within --max-seconds {args.max_seconds:g}",
                  "; ".join(bench.cut) or "yes", not bench.cut)
    return rows, [*(c for r in rows for c in row_checks(r)), bound]


def loads(args: argparse.Namespace, requests: Sequence[TrafficRequest],
          states: Mapping[str, SimState]) -> list[Load]:
    closed = [Load(f"{c} clients", clients=c) for c in args.clients]
    opened = [Load(f"open {u:.0%}", arrivals_s=open_arrivals(requests, states, u, args.seed))
              for u in args.utilisation]
    return closed + opened


# --- capacity ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Capacity:
    rps: float
    cpu_ms: dict[str, float]  # process -> CPU ms per request
    cores_used: float  # by these processes, over the measurement
    machine_busy: float  # the share of the machine's cores busy meanwhile (anyone's work)

    def ceiling(self, cores: int, single_threaded: Sequence[str]) -> float:
        """The req/s these CPU costs allow on `cores`: every process together, and each
        single-threaded one on one core."""
        bounds = [cores * 1000 / sum(self.cpu_ms.values())]
        bounds += [1000 / self.cpu_ms[name] for name in single_threaded if self.cpu_ms[name] > 0]
        return min(bounds)


async def measure_capacity(url: str, pids: Mapping[str, list[int]], clients: int,
                           bodies: Sequence[bytes]) -> Capacity:
    """req/s at `clients` concurrent clients, and each process's CPU per request."""
    before = {name: cpu_seconds(p) for name, p in pids.items()}
    machine_before, started = machine_jiffies(), time.monotonic()
    rps, _ = await throughput(Target("replicas", url), clients, len(bodies) - clients, bodies)
    seconds = time.monotonic() - started
    machine_after = machine_jiffies()
    spent = {name: cpu_seconds(p) - before[name] for name, p in pids.items()}
    requests = len(bodies)  # the measured ones and throughput's warm-up
    busy, total = (a - b for a, b in zip(machine_after, machine_before, strict=True))
    return Capacity(rps, {name: cpu / requests * 1000 for name, cpu in spent.items()},
                    sum(spent.values()) / seconds, busy / total if total else math.nan)


def machine_jiffies() -> tuple[int, int]:
    """(busy, all) CPU time of the whole machine since boot, in clock ticks (/proc/stat)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle, iowait; the rest: user, nice, system, irq, softirq, steal
    return sum(ticks) - idle, sum(ticks)


async def capacity(args: argparse.Namespace, work: Path, nginx: str) -> tuple[str, list[Check]]:
    work = work / "capacity"
    work.mkdir()
    (work / "policy.yaml").write_text(POLICY_PATH.read_text(encoding="utf-8"), encoding="utf-8")
    processes: list[subprocess.Popen[bytes] | None] = []
    store: RedisServer | None = None
    try:
        up_port = free_port()
        upstream = spawn([sys.executable, "-m", "bench.proxy_overhead", "--role", "upstream",
                          "--port", str(up_port)], work / "upstream.stderr")
        processes.append(upstream)
        await wait_ready(f"http://127.0.0.1:{up_port}")
        specs = [BackendSpec(name=f"{p}-0", engine="llamacpp", profile=p,
                             url=f"http://127.0.0.1:{up_port}") for p in ("mtp", "plain")]
        store = await asyncio.to_thread(start_redis)
        replicas = [await start_proxy(work, f"r{i}", specs, store=store.url, tokenizer=True,
                                      probe=False, pass_on=not args.no_pass_on)
                    for i in range(2)]
        processes += [r.process for r in replicas]
        fronts = {}
        for n in (1, 2):
            process, port = await start_nginx(nginx, work / f"nginx-{n}",
                                              [r.port for r in replicas[:n]], balance="",
                                              keepalive=64)
            processes.append(process)
            fronts[n] = (process, f"http://127.0.0.1:{port}")
        best = await _best_capacity(args, fronts, replicas, upstream, store)
    finally:
        await stopped(*reversed(processes))
        if store is not None:
            await asyncio.to_thread(store.stop)
    return _capacity_report(args, best)


async def _best_capacity(args: argparse.Namespace,
                         fronts: Mapping[int, tuple[subprocess.Popen[bytes], str]],
                         replicas: Sequence[Proxy], upstream: subprocess.Popen[bytes],
                         store: RedisServer) -> dict[int, Capacity]:
    """Per set-up, the best of `--capacity-rounds` (1 and 2 replicas alternated)."""
    clients, n = args.capacity_clients, args.capacity_requests
    asks = itertools.count()  # every ask new, in every measurement: no memo or cache serves it
    best: dict[int, Capacity] = {}
    for turn in range(args.capacity_rounds):
        for count in (1, 2) if turn % 2 == 0 else (2, 1):
            front, url = fronts[count]
            pids = {f"replica {r.name}": [r.process.pid] for r in replicas}
            pids.update({"nginx": [front.pid, *children(front.pid)], "upstream": [upstream.pid],
                         "redis": [store.process.pid], "load generator": [os.getpid()]})
            bodies = [make_body("1k", stream=False, ask=next(asks)) for _ in range(n + clients)]
            measured = await measure_capacity(url, pids, clients, bodies)
            if count not in best or measured.rps > best[count].rps:
                best[count] = measured
    return best


def _capacity_report(args: argparse.Namespace, best: Mapping[int, Capacity]
                     ) -> tuple[str, list[Check]]:
    cores = len(os.sched_getaffinity(0))
    title = (f"\nCapacity: req/s at {args.capacity_clients} clients, 1 KB chat bodies (every ask "
             f"new), one fast fake upstream; best of {args.capacity_rounds} rounds; {cores} "
             "cores; CPU per request in us:")
    lines = [title]
    for count, measured in best.items():
        cpu = ", ".join(f"{name} {ms * 1000:.0f}" for name, ms in measured.cpu_ms.items())
        lines.append(f"  {count} replica{'s' if count > 1 else ' '} behind nginx: "
                     f"{measured.rps:7,.0f} req/s   ({cpu}; in all "
                     f"{sum(measured.cpu_ms.values()) * 1000:.0f}); these processes used "
                     f"{measured.cores_used:.2f} cores, the machine was "
                     f"{measured.machine_busy:.0%} busy")
    one, two = best[1], best[2]
    ratio = two.rps / one.rps
    # what 1.8x one replica would take: the 2-replica set-up's CPU per request at that rate
    want = CAPACITY_TARGET * one.rps
    cores_needed = want * sum(two.cpu_ms.values()) / 1000
    others = ["nginx", "upstream", "load generator"]  # single-threaded, besides the replicas
    single_bound = min(1000 / two.cpu_ms[n] for n in others if two.cpu_ms[n] > 0)
    allowed = two.ceiling(cores, [*others, *(n for n in two.cpu_ms if n.startswith("replica"))])
    lines.append(f"  2 replicas / 1: {ratio:.2f}; {CAPACITY_TARGET:g}x ({want:,.0f} req/s) would "
                 f"take {cores_needed:.1f} cores at these costs (this machine: {cores}); these "
                 f"costs allow at most {allowed:,.0f} req/s with 2 replicas here = "
                 f"{allowed / one.rps:.2f}x one")
    applies = cores_needed <= cores and want <= single_bound
    check = Check(f"capacity: 2 replicas >= {CAPACITY_TARGET:g} x 1 (where the cores allow)",
                  f"{ratio:.2f} (the machine allowed {allowed / one.rps:.2f})",
                  ratio >= CAPACITY_TARGET if applies else None)
    return "\n".join(lines), [check]


# --- the run -----------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> int:
    nginx = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/bin/nginx") if Path(p).exists()), None)
    if nginx is None or redis_binary() is None:
        print("nginx or redis-server is not installed (apt-get install -y nginx redis-server): "
              "nothing measured")
        return 0
    started = time.monotonic()
    deadline = started + args.max_seconds
    work = Path(tempfile.mkdtemp(prefix="specroute-replicas-"))
    rows: list[Row] = []
    checks: list[Check] = []
    report = ""
    try:
        if not args.skip_capacity:  # first: the routing runs are paced, this wants every core
            report, checks = await capacity(args, work, nginx)
            print(report, flush=True)
        if not args.skip_routing:
            rows, more = await routing(args, work, nginx, deadline)
            checks += more
    finally:
        if args.keep:
            print(f"(work files kept in {work})")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if rows:
        print("\n" + markdown_table(rows))
    return _verdict(checks, time.monotonic() - started)


def _verdict(checks: Sequence[Check], seconds: float) -> int:
    print("\nTargets:")
    for check in checks:
        status = "N/A " if check.ok is None else "PASS" if check.ok else "MISS"
        print(f"  {status} {check.what}: {check.measured}")
    missed = sum(1 for c in checks if c.ok is False)
    print(f"\n{missed} of {len(checks)} targets missed ({seconds:.0f} s)")
    return 1 if missed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--mixes", nargs="+", default=list(DEFAULT_MIXES), choices=list(MIXES),
                        help="bench.traffic mixes (all four: a run of ~15 minutes)")
    parser.add_argument("--requests", type=int, default=80, help="requests per run")
    parser.add_argument("--clients", type=int, nargs="*", default=[4, 8],
                        help="closed-loop clients, one run each")
    parser.add_argument("--utilisation", type=float, nargs="*", default=[0.8],
                        help="open-loop arrival rates, as a share of the instances' plain "
                             "capacity, one run each")
    parser.add_argument("--machine", default="gb10", choices=list(MACHINES),
                        help="the simulated machine's step costs")
    parser.add_argument("--time-scale", type=float, default=0.1,
                        help="share of real time the simulated engines take")
    parser.add_argument("--seed", type=int, default=7, help="traffic and arrivals")
    parser.add_argument("--load-interval", type=float, default=LoadConfig().interval_s,
                        help="how often each specroute reads the engines' queue gauges "
                             "(load.interval_s; the default is the shipped one)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of each set-up per mix and load, alternated; the targets "
                             "are judged on the rounds merged, each ratio's range is shown")
    parser.add_argument("--sync-interval", type=float, default=SYNC_INTERVAL_S,
                        help="how often each replica publishes its sums and adds the others' "
                             "(replicas.sync_interval_s; the default is the shipped one)")
    parser.add_argument("--skip-kill", action="store_true", help="no run with the store killed")
    parser.add_argument("--no-pass-on", action="store_true",
                        help="replicas without replicas.url: a request for a free instance in "
                        "another's share is sent, not passed to its owner (the comparison)")
    parser.add_argument("--skip-routing", action="store_true", help="capacity only")
    parser.add_argument("--skip-capacity", action="store_true", help="routing only")
    parser.add_argument("--capacity-clients", type=int, default=32,
                        help="concurrent clients of the capacity measurement")
    parser.add_argument("--capacity-requests", type=int, default=3000,
                        help="requests per capacity measurement")
    parser.add_argument("--capacity-rounds", type=int, default=3,
                        help="capacity measurements per set-up, alternated; the best counts")
    parser.add_argument("--max-seconds", type=float, default=3600.0,
                        help="wall-time bound of the routing runs")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args(argv)
    if args.skip_routing and args.skip_capacity:
        parser.error("nothing to run")
    if (args.requests < 2 or args.rounds < 1 or args.capacity_rounds < 1
            or args.capacity_requests < 1):
        parser.error("--requests >= 2, --rounds >= 1, --capacity-rounds >= 1, "
                     "--capacity-requests >= 1")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
