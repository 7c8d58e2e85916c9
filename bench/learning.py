"""Does specroute beat a static flag and a plain load balancer, on machines it was not tuned on?

    .venv/bin/python -m bench.learning [--machines ...] [--requests 300] [--long 3000]
                                       [--mixes ...] [--prior neutral] [--seed 7]

Two instances paced by the simulated engine (`backends/local/simulator.py`: the depth-1 cost
model, per-class acceptance, one request at a time per instance) on each of several machines
(`simulator.MACHINES`): the GB10 running ds4, one with the GB10's ratios at another pace, one
where speculation loses on every class, one where it wins on every class. Acceptance is the
workload's (the GB10's published per-class speedups give it), the same on every machine; the
step costs make the speedup. Virtual time: each request's decode time on each instance is the
simulator's own plan for that body, and the instances serve FIFO. The routers, on the same
request sequence and arrival times:

- `specroute`: the real decision (`policies.decision.decide` over the shipped policy, the shipped
  classifier, the policy's prior unless `--prior` says another, Thompson draws), the real
  in-flight tracker (`router.instances.pool.BackendPool`), the startup probe's records
  (`router.instances.pace_probe`) and the model updated online from each outcome as the proxy does
  (`policies.learner.routemodel.observe`); from a cold start.
- `always-mtp` / `always-plain`: the static flag: both instances with it, least connections.
- `least_conn`: nginx's `least_conn` over the mtp/plain pair (fewest in flight; ties in turn).
- `oracle`: label-peeking soonest finish (it knows each request's decode time on each instance).
- `per-class` (1 client): the better instance for each true class (the per-class ceiling).

Closed loop: 1, 2 and 4 clients, each sending its next request when the last one finished.
Open loop: Poisson arrivals at 50% and 80% of the pair's plain capacity (mean latency compared).
With `slots` > 1 (`simulate`, `bench/batching.py`) each instance batches instead: up to `slots`
requests decode at once, each at the machine's per-token time for the batch in force (processor
sharing over `CostModel.at_batch`, as the simulated engine paces them), the rest wait FIFO.
Traffic: `bench/traffic.py` mixes (agent-heavy, chat-heavy, balanced, sampled), from templates
outside the classifier's training corpus. Prints ratios measured side by side in one run and
checks the targets: 1 client >= 0.98 x best static over the first 100 requests and >= 0.99 x
over the run (above it where a per-class margin exists: the long run's share says how much); 2 and 4 clients >= 0.98 x least_conn; open loop latency <= least_conn's;
the long run keeps >= 60% of the per-class margin where one exists. `--live` also drives the
real proxy and nginx over HTTP (`bench/learning_live.py`).
"""

from __future__ import annotations

import argparse
import copy
import heapq
import itertools
import math
import random
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from statistics import NormalDist
from typing import Final

from backends.capability import PROBE_KINDS, ProbeResult, TimedProbe, probe_body
from backends.local.simulator import MACHINES, CostModel, SimState, decode_plan, prompt_tokens_of
from backends.spec import BackendSpec
from backends.stats import UpstreamReport
from bench.machines import POLICY_PATH, machine_states, workload_acceptance
from bench.traffic import MIXES, TrafficRequest, make_mix
from classifiers.features import Features, extract
from classifiers.model import load_artifact
from classifiers.request_view import view_request
from classifiers.scorer import Scorer
from classifiers.scores import Scores
from fileio.yamlfile import load_model
from policies.decision.ask import Ask, State
from policies.decision.decide import Decision, decide
from policies.learner.learned import predicted_speedup
from policies.learner.observation import Observation, observation_from_record, request_inputs
from policies.learner.routemodel import RouteEvidence, RouteModel, observe
from policies.learner.speedup import PriorTerms
from policies.policyfile.machine import BUILTIN, MachinePrior
from policies.policyfile.schema import Policy
from policies.store import load_prior
from router.instances.pace_probe import probe_records
from router.instances.pool import BackendPool, Batch

PAIR: Final = (("mtp-0", "mtp"), ("plain-0", "plain"))
# The machines every run compares by default (the GB10 first: the figures it was built for).
DEFAULT_MACHINES: Final = ("gb10", "gb10-like", "slow-verify", "cheap-verify")
FIRST: Final = 100  # the cold start's window: requests routed before the learner has much
# 1 client over a whole run: where one profile wins every class, the best static flag is the
# ceiling and measuring the other instance (a few thin draws) costs a few tenths of a percent
SINGLE_CLIENT_FLOOR: Final = 0.99


@dataclass(frozen=True, slots=True)
class Arm:
    tokens: int
    ms: float  # decode time as the simulated engine paces it
    draft_n: int | None
    draft_accepted: int | None
    extra_ms: float = 0.0  # speculation's extra work in `ms` (timed apart in a batch)


@dataclass(frozen=True, slots=True)
class Item:
    request: TrafficRequest
    features: Features
    scores: Scores
    arms: dict[str, Arm]  # profile -> arm

    @property
    def tokens(self) -> int:
        return self.arms["plain"].tokens


def measure(requests: Sequence[TrafficRequest], machine: str = "gb10") -> list[Item]:
    """Features and the shipped classifier's scores, and the simulator's plan on each profile
    of `machine`."""
    sims = machine_states(machine)
    scorer, items = load_artifact(), []
    for r in requests:
        view = view_request("chat", r.body)
        features = extract(view)
        arms = {}
        for profile, state in sims.items():
            arms[profile] = _arm(state, r.body)
        items.append(Item(r, features, scorer.score(view, features), arms))
    return items


def _arm(state: SimState, body: dict[str, object]) -> Arm:
    plan = decode_plan(state, body)
    mtp = state.profile == "mtp"
    return Arm(len(plan.tokens), plan.total_s * 1000.0, plan.draft_n if mtp else None,
               plan.accepted if mtp else None, sum(plan.extra_s) * 1000.0)


def probe_evidence(machine: str, policy: Policy, scorer: Scorer) -> RouteEvidence:
    """What the proxy's startup probe teaches on `machine`: each probe request (a copy-heavy
    and a free-form one) timed on each instance, taken as records (`router.instances.pace_probe`, the
    proxy's own code)."""
    timed: dict[str, dict[str, TimedProbe]] = {}
    for name, profile in PAIR:
        state = machine_states(machine)[profile]
        for kind in PROBE_KINDS:
            body = probe_body("sim-model", kind)
            plan = decode_plan(state, body)
            ms = plan.total_s * 1000.0
            report = UpstreamReport(prompt_tokens=plan.prompt_tokens,
                                    completion_tokens=len(plan.tokens),
                                    backend_tps=len(plan.tokens) / ms * 1000.0,
                                    draft_n=plan.draft_n if profile == "mtp" else None,
                                    draft_accepted=plan.accepted if profile == "mtp" else None)
            timed.setdefault(name, {})[kind] = TimedProbe(body, report, ms)
    result = ProbeResult({}, "sim-model", {}, (), (), timed)
    specs = [BackendSpec(name=n, profile=p, url="http://127.0.0.1:9") for n, p in PAIR]
    evidence = RouteEvidence()
    for record in probe_records(result, specs, scorer, None, datetime(2026, 1, 1, tzinfo=UTC)):
        o = observation_from_record(record)
        if o is not None:
            evidence = observe(evidence, o, policy.assume)
    return evidence


# --- routers ---------------------------------------------------------------------------------


class Router:
    """Picks an instance for a request arriving at `now_ms`; told when it finishes."""

    name = "router"

    def route(self, item: Item, now_ms: float, sim: Simulation) -> tuple[str, Decision | None]:
        """(instance, the decision the in-flight tracker prices it by; None: not predicted)."""
        raise NotImplementedError

    def finished(self, item: Item, name: str, arrived: float, started: float, ended: float,
                 queued: bool, served: Served | None = None) -> None:
        """A request is done (what the proxy's record sink sees; `served`: how a batching
        instance served it, None: alone, in its arm's time)."""


class LeastConn(Router):
    name = "least_conn"

    def __init__(self) -> None:
        self._turn = itertools.count()

    def route(self, item: Item, now_ms: float, sim: Simulation) -> tuple[str, Decision | None]:
        fewest = min(sim.inflight.values())
        tied = [n for n, _ in sim.instances if sim.inflight[n] == fewest]
        return tied[next(self._turn) % len(tied)], None


class Oracle(Router):
    """Label-peeking: the true decode time on each instance and the true queue."""

    name = "oracle"

    def route(self, item: Item, now_ms: float, sim: Simulation) -> tuple[str, Decision | None]:
        def finish(name: str, profile: str) -> float:
            return max(now_ms, sim.free_at[name]) + item.arms[profile].ms

        name = min(sim.instances, key=lambda i: (finish(*i), i[1] != "plain", i[0]))[0]
        return name, None


class PerClass(Router):
    """The better profile for each true class (the per-class static ceiling), least busy."""

    name = "per-class"

    def __init__(self, best: dict[str, str]) -> None:
        self._best = best

    def route(self, item: Item, now_ms: float, sim: Simulation) -> tuple[str, Decision | None]:
        want = self._best[item.request.cls]
        pool = [n for n, p in sim.instances if p == want] or [n for n, _ in sim.instances]
        return min(pool, key=lambda n: (sim.inflight[n], n)), None


class Specroute(Router):
    """The real decision and online learning, from the prior and the startup probe."""

    name = "specroute"

    def __init__(self, policy: Policy, seed: int, prior: MachinePrior,
                 probed: RouteEvidence | None = None) -> None:
        self.policy = policy
        self.prior, self.terms = prior, PriorTerms.of(prior)
        self.evidence = probed if probed is not None else RouteEvidence()
        self.model = RouteModel(prior, self.evidence, self.terms)
        self._rng = random.Random(seed)
        self._normal = NormalDist()
        self.explored = 0
        self.to_mtp: dict[str, int] = {}
        # id(item) -> the decision's queue ahead, profile and p_spec (None: nothing predicted)
        self._decisions: dict[int, tuple[float, str, float | None]] = {}
        self._clock = 0
        self.routed: list[str] = []  # the profile of each request, in arrival order

    def route(self, item: Item, now_ms: float, sim: Simulation) -> tuple[str, Decision | None]:
        states = sim.pool.states(now_ms / 1000.0)
        z = self._normal.inv_cdf(min(max(self._rng.random(), 1e-9), 1 - 1e-9))
        d = decide(Ask(item.features, item.scores), State(self.policy, self.model, states), z=z)
        self.explored += d.explored
        key = f"{item.request.cls}/{item.request.lang}"
        self.to_mtp[key] = self.to_mtp.get(key, 0) + (d.profile == "mtp")
        self._decisions[id(item)] = (d.queue_ms, d.profile, d.p_spec)
        self.routed.append(d.profile)
        sim.pool.note_losses(d.losses_ms)  # as the proxy does when it sends the request
        return d.backend, d

    def finished(self, item: Item, name: str, arrived: float, started: float, ended: float,
                 queued: bool, served: Served | None = None) -> None:
        queue_ms, profile, p_spec = self._decisions.pop(id(item))
        arm = item.arms[profile]
        decode_ms = arm.ms if served is None else served.decode_ms
        self._clock += 1
        o = Observation(
            # p_spec: the decision's, read as the learner reads it from a record
            cls=item.scores.top_class, lang=item.scores.lang,
            p_spec=0.5 if p_spec is None else p_spec,
            profile=profile, completion_tokens=arm.tokens, decode_tps=arm.tokens / decode_ms * 1000,
            draft_n=arm.draft_n, draft_accepted=arm.draft_accepted,
            prompt_tokens=prompt_tokens_of(item.request.body), ttft_ms=started - arrived,
            temperature=item.features.temperature,
            thinking=None if item.features.thinking_unset else item.features.thinking,
            inputs=request_inputs(item.features.as_dict(), item.scores.scores),
            queued=queue_ms > 0, backend=name, ts=f"{self._clock:012d}",
            batch=1.0 if served is None else served.batch.mean,
            batch_start=1.0 if served is None else float(served.batch.start),
        )
        self.evidence = observe(self.evidence, o, self.policy.assume)
        self.model = RouteModel(self.prior, self.evidence, self.terms)


# --- the simulation --------------------------------------------------------------------------


@dataclass
class Simulation:
    """Instances serving FIFO one request at a time, in virtual milliseconds."""

    instances: tuple[tuple[str, str], ...]
    free_at: dict[str, float] = field(default_factory=dict)
    inflight: dict[str, int] = field(default_factory=dict)
    busy_ms: dict[str, float] = field(default_factory=dict)
    pool: BackendPool = field(init=False)
    # the batching instances, when they batch (what a clairvoyant router may look into)
    batches: dict[str, Batching] = field(default_factory=dict)

    def __post_init__(self) -> None:
        specs = [BackendSpec(name=n, profile=p, url="http://127.0.0.1:9") for n, p in self.instances]
        self.pool = BackendPool(specs)
        for name, _ in self.instances:
            self.free_at[name], self.inflight[name], self.busy_ms[name] = 0.0, 0, 0.0


@dataclass(frozen=True, slots=True)
class Served:
    """How a batching instance served a request: its decode in the batch, and the batch it ran
    in as the pool counted it (what its record carries: `BackendPool.end`)."""

    decode_ms: float
    batch: Batch


@dataclass
class Batching:
    """One instance batching up to `slots` requests, in virtual milliseconds: each one decoding
    has a share of its decode left, done at its arm's cost at the batch in force (`cost.at_batch`:
    processor sharing); the rest wait FIFO."""

    slots: int
    cost: CostModel
    # index -> (share of its decode left, its plain work and speculation's extra, ms alone)
    running: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)  # index -> when it got a slot
    waiting: deque[tuple[int, Arm]] = field(default_factory=deque)
    at: float = 0.0
    busy_ms: float = 0.0  # time with a request decoding
    pending: int = -1  # the key of its one completion event that still holds

    def advance(self, now: float) -> None:
        batch = len(self.running)
        if batch and now > self.at:
            span = now - self.at
            self.busy_ms += span
            self.running = {i: (left - span / self.cost.at_batch(base, extra, batch), base, extra)
                            for i, (left, base, extra) in self.running.items()}
        self.at = max(self.at, now)

    def join(self, index: int, arm: Arm, now: float) -> None:
        self.advance(now)
        self.waiting.append((index, arm))
        self._admit(now)

    def leave(self, index: int, now: float) -> float:
        """It ended at `now`: the next ones waiting take its slot; when it had got its own."""
        self.advance(now)
        del self.running[index]
        self._admit(now)
        return self.started.pop(index)

    def _admit(self, now: float) -> None:
        while self.waiting and len(self.running) < self.slots:
            index, arm = self.waiting.popleft()
            self.running[index] = (1.0, arm.ms - arm.extra_ms, arm.extra_ms)
            self.started[index] = now

    def ends_alone(self, now: float) -> dict[int, float]:
        """When each request here would end were nothing more to come (a copy runs on)."""
        ahead = copy.deepcopy(self)
        ahead.advance(now)
        ends: dict[int, float] = {}
        while ahead.running:
            at, index = ahead.next_end()  # type: ignore[misc]  # running: there is one
            ahead.leave(index, at)
            ends[index] = at
        return ends

    def next_end(self) -> tuple[float, int] | None:
        batch = len(self.running)
        return min(((self.at + max(0.0, left) * self.cost.at_batch(base, extra, batch), i)
                    for i, (left, base, extra) in self.running.items()), default=None)


@dataclass(frozen=True, slots=True)
class Outcome:
    tokens: int
    makespan_ms: float
    mean_latency_ms: float
    to_mtp: int
    busy_share: dict[str, float]
    # per true class: (requests sent to an mtp instance, requests)
    classes: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def tps(self) -> float:
        return self.tokens / self.makespan_ms * 1000.0 if self.makespan_ms else 0.0


def simulate(
    items: Sequence[Item], instances: tuple[tuple[str, str], ...], router: Router, *,
    clients: int | None = None, arrivals_ms: Sequence[float] | None = None,
    slots: int = 1, cost: CostModel | None = None,
) -> Outcome:
    """Closed loop (`clients`) or open loop (`arrivals_ms`, one per item); with `slots` > 1,
    each instance batches up to `slots` at a time on `cost`'s curves (else FIFO, one at a
    time)."""
    sim = Simulation(instances)
    batches = {n: Batching(slots, cost) for n, _ in instances} if slots > 1 and cost else {}
    sim.batches = batches
    for n in batches:
        sim.pool.set_slots(n, slots, "engine")
    classes: dict[str, tuple[int, int]] = {}
    profile_of = dict(instances)
    events: list[tuple[float, int, int, str, int]] = []  # (time, kind, seq, instance, index)
    seq = itertools.count()
    next_item = 0
    if arrivals_ms is not None:
        for index, t in enumerate(arrivals_ms):
            heapq.heappush(events, (t, 1, next(seq), "", index))
        next_item = len(items)
    else:
        for _ in range(min(clients or 1, len(items))):
            heapq.heappush(events, (0.0, 1, next(seq), "", next_item))
            next_item += 1
    arrived: dict[int, float] = {}
    tickets: dict[int, tuple[str, int, float, bool]] = {}
    tokens = to_mtp = 0
    latency = end = 0.0
    while events:
        now, kind, key, name, index = heapq.heappop(events)
        item = items[index]
        batching = batches.get(name)
        if kind == 0:  # a completion (before arrivals at the same instant)
            if batching is not None and key != batching.pending:
                continue  # the batch changed since it was due: its end was scheduled again
            ticket_name, ticket, started, queued = tickets.pop(index)
            batch = sim.pool.end(ticket_name, ticket, now / 1000.0)
            served = None
            if batching is not None:
                started = batching.leave(index, now)
                queued = started > arrived[index]
                served = Served(now - started, batch or Batch(1, 1.0))
                _schedule_end(events, next(seq), name, batching)
            sim.inflight[name] -= 1
            router.finished(item, name, arrived[index], started, now, queued, served)
            latency += now - arrived[index]
            end = max(end, now)
            if arrivals_ms is None and next_item < len(items):
                heapq.heappush(events, (now, 1, next(seq), "", next_item))
                next_item += 1
            continue
        arrived[index] = now
        name, decided = router.route(item, now, sim)
        profile, batching = profile_of[name], batches.get(name)
        arm = item.arms[profile]
        sent, total = classes.get(item.request.cls, (0, 0))
        classes[item.request.cls] = (sent + (profile == "mtp"), total + 1)
        if batching is not None:
            batching.join(index, arm, now)
            started = finished = math.nan  # when it gets a slot, when it ends: as it goes
        else:
            started = max(now, sim.free_at[name])
            finished = started + arm.ms
            sim.free_at[name] = finished
            sim.busy_ms[name] += arm.ms
        sim.inflight[name] += 1
        ticket = (sim.pool.begin(name, now=now / 1000.0) if decided is None else
                  sim.pool.begin(name, decided.service_ms, now / 1000.0,
                                 spread=decided.tokens_sd, most_ms=decided.most_ms))
        tickets[index] = (name, ticket, started, started > now)
        tokens += arm.tokens
        to_mtp += profile == "mtp"
        if batching is not None:
            _schedule_end(events, next(seq), name, batching)
        else:
            heapq.heappush(events, (finished, 0, next(seq), name, index))
    for n, batching in batches.items():
        sim.busy_ms[n] = batching.busy_ms
    busy = {n: (sim.busy_ms[n] / end if end else 0.0) for n, _ in instances}
    return Outcome(tokens, end, latency / max(1, len(items)), to_mtp, busy, classes)


def _schedule_end(events: list[tuple[float, int, int, str, int]], key: int, name: str,
                  batching: Batching) -> None:
    """The batch changed: its next end, the one that holds (`Batching.pending`)."""
    due = batching.next_end()
    if due is not None:
        batching.pending = key
        heapq.heappush(events, (due[0], 0, key, name, due[1]))


# --- the benchmark ---------------------------------------------------------------------------


def static_instances(profile: str) -> tuple[tuple[str, str], ...]:
    return ((f"{profile}-0", profile), (f"{profile}-1", profile))


def best_per_class(items: Sequence[Item]) -> dict[str, str]:
    totals: dict[str, dict[str, list[float]]] = {}
    for it in items:
        per = totals.setdefault(it.request.cls, {"mtp": [0, 0.0], "plain": [0, 0.0]})
        for profile, arm in it.arms.items():
            per[profile][0] += arm.tokens
            per[profile][1] += arm.ms
    return {c: max(per, key=lambda p: per[p][0] / per[p][1]) for c, per in totals.items()}


def poisson_arrivals(n: int, rate_per_ms: float, seed: int) -> list[float]:
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate_per_ms)
        out.append(t)
    return out


SpecFactory = Callable[[], Specroute]


@dataclass(frozen=True, slots=True)
class Setting:
    """What every specroute run of one machine starts from: the policy, its prior, the probe."""

    policy: Policy
    prior: MachinePrior
    probed: RouteEvidence
    seed: int

    def specroute(self) -> Specroute:
        return Specroute(self.policy, self.seed, self.prior, self.probed)


def closed_loop_row(items: Sequence[Item], clients: int, setting: Setting) -> dict[str, Outcome]:
    runs: dict[str, tuple[tuple[tuple[str, str], ...], Router]] = {
        "specroute": (PAIR, setting.specroute()),
        "always-mtp": (static_instances("mtp"), LeastConn()),
        "always-plain": (static_instances("plain"), LeastConn()),
        "least_conn": (PAIR, LeastConn()),
        "oracle": (PAIR, Oracle()),
    }
    if clients == 1:
        runs["per-class"] = (PAIR, PerClass(best_per_class(items)))
    return {name: simulate(items, inst, r, clients=clients) for name, (inst, r) in runs.items()}


def open_loop_row(items: Sequence[Item], utilisation: float, setting: Setting
                  ) -> dict[str, Outcome]:
    mean_plain_ms = sum(it.arms["plain"].ms for it in items) / len(items)
    rate = utilisation * 2.0 / mean_plain_ms
    arrivals = poisson_arrivals(len(items), rate, setting.seed)
    runs: dict[str, tuple[tuple[tuple[str, str], ...], Router]] = {
        "specroute": (PAIR, setting.specroute()),
        "least_conn": (PAIR, LeastConn()),
        "oracle": (PAIR, Oracle()),
    }
    return {name: simulate(items, inst, r, arrivals_ms=arrivals) for name, (inst, r) in runs.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--machines", nargs="+", default=list(DEFAULT_MACHINES),
                        choices=list(MACHINES), help="simulated machines, side by side")
    parser.add_argument("--requests", type=int, default=300, help="requests per run, cold start")
    parser.add_argument("--long", type=int, default=3000,
                        help="requests of the long 1-client run per mix (0: skip)")
    parser.add_argument("--mixes", nargs="+", default=list(MIXES), choices=list(MIXES))
    parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens of every request")
    parser.add_argument("--prior", default="", choices=["", *BUILTIN],
                        help="the machine prior to start from (default: the shipped policy's)")
    parser.add_argument("--seed", type=int, default=7, help="traffic, arrivals and draws")
    parser.add_argument("--live", action="store_true",
                        help="also drive the real proxy and nginx least_conn over HTTP "
                             "(bench/learning_live.py)")
    args = parser.parse_args(argv)
    policy = load_model(POLICY_PATH, Policy)
    prior = BUILTIN[args.prior] if args.prior else load_prior(policy, POLICY_PATH)
    started = time.monotonic()
    failures: list[str] = []
    scorer = load_artifact()
    print(f"Simulated machines, virtual time; {args.requests} requests per run from a cold start "
          f"(prior {prior.name}, then the startup probe), max_tokens {args.max_tokens}, "
          f"seed {args.seed}")
    for machine in args.machines:
        cost = MACHINES[machine]
        setting = Setting(policy, prior, probe_evidence(machine, policy, scorer), args.seed)
        print(f"\n#### machine {machine}: plain {cost.t_plain_ms:g} ms, verify "
              f"{cost.t_verify_ms:g} ms, draft {cost.t_draft_ms:g} ms, gate skip "
              f"{cost.gate_skip:.0%}; per-class mtp/plain {_speedups(machine)}")
        for mix in args.mixes:
            failures += run_mix(machine, mix, setting, args)
    print(f"\n({time.monotonic() - started:.0f} s)")
    if args.live:
        from bench.learning_live import main as live_main

        live_main(["--seed", str(args.seed)])
    if failures:
        print("targets missed: " + "; ".join(failures))
        return 1
    print("all targets met")
    return 0


def run_mix(machine: str, mix: str, setting: Setting, args: argparse.Namespace) -> list[str]:
    items = measure(make_mix(mix, args.requests, args.seed, args.max_tokens), machine)
    failures: list[str] = []
    where = f"{machine} {mix}"
    print(f"\n== {where}")
    print(f"  {'run':<12} {'specroute':>9} {'a-mtp':>7} {'a-plain':>7} {'lc':>7} "
          f"{'oracle':>7} {'per-cls':>7}   spec/best-static spec/lc  to-mtp (spec/lc)")
    failures += _print_first(where, closed_loop_row(items[:FIRST], 1, setting))
    for clients in (1, 2, 4):
        failures += _print_closed(where, clients, closed_loop_row(items, clients, setting))
    for utilisation in (0.5, 0.8):
        failures += _print_open(where, utilisation, open_loop_row(items, utilisation, setting))
    if args.long:
        long_items = measure(make_mix(mix, args.long, args.seed + 1, args.max_tokens), machine)
        failures += _print_long(where, args.long, closed_loop_row(long_items, 1, setting))
    return failures


def _speedups(machine: str) -> str:
    """Each class's true mtp/plain decode-rate ratio on `machine` (from the cost model)."""
    cost = MACHINES[machine]
    share = 1 - cost.gate_skip
    steps = (cost.t_plain_ms, cost.t_plain_ms + cost.t_draft_ms, cost.t_verify_ms + cost.t_draft_ms)
    return ", ".join(f"{c} {predicted_speedup(a, share, *steps):.3f}"
                     for c, a in workload_acceptance().items())


def _print_first(where: str, row: dict[str, Outcome]) -> list[str]:
    tps = {k: v.tps for k, v in row.items()}
    best_static = max(tps["always-mtp"], tps["always-plain"])
    ratio = tps["specroute"] / best_static
    print(f"  first {FIRST:<5} {tps['specroute']:9.2f} {tps['always-mtp']:7.2f} "
          f"{tps['always-plain']:7.2f} {tps['least_conn']:7.2f} {tps['oracle']:7.2f} "
          f"{tps['per-class']:7.2f}   {ratio:16.3f} {'':>7}  {row['specroute'].to_mtp}/"
          f"{row['least_conn'].to_mtp}")
    return [] if ratio >= 0.98 else [f"{where} first {FIRST}: {ratio:.3f} of best static"]


def _print_closed(mix: str, clients: int, row: dict[str, Outcome]) -> list[str]:
    tps = {k: v.tps for k, v in row.items()}
    best_static = max(tps["always-mtp"], tps["always-plain"])
    per_class = f"{tps['per-class']:7.2f}" if "per-class" in tps else f"{'':>7}"
    spec_best, spec_lc = tps["specroute"] / best_static, tps["specroute"] / tps["least_conn"]
    print(f"  {clients} client{'s' if clients > 1 else ' '}    {tps['specroute']:9.2f} "
          f"{tps['always-mtp']:7.2f} {tps['always-plain']:7.2f} {tps['least_conn']:7.2f} "
          f"{tps['oracle']:7.2f} {per_class}   {spec_best:16.3f} {spec_lc:7.3f}  "
          f"{row['specroute'].to_mtp}/{row['least_conn'].to_mtp}")
    if clients == 1 and spec_best < SINGLE_CLIENT_FLOOR:
        return [f"{mix} 1 client: {spec_best:.3f} of best static"]
    if clients > 1 and spec_lc < 0.98:
        return [f"{mix} {clients} clients: {spec_lc:.3f} of least_conn"]
    return []


def _print_open(mix: str, utilisation: float, row: dict[str, Outcome]) -> list[str]:
    lat = {k: v.mean_latency_ms for k, v in row.items()}
    ratio = lat["least_conn"] / lat["specroute"]
    busy = ", ".join(f"{n} {s:.0%}" for n, s in row["specroute"].busy_share.items())
    print(f"  open {utilisation:.0%}     mean latency ms: specroute {lat['specroute']:.0f}, "
          f"least_conn {lat['least_conn']:.0f}, oracle {lat['oracle']:.0f}; "
          f"lc/spec {ratio:.3f}, oracle/spec {lat['oracle'] / lat['specroute']:.3f} "
          f"(busy: {busy})")
    return [] if ratio >= 1.0 else [f"{mix} open {utilisation:.0%}: latency {1 / ratio:.3f}x lc"]


def _print_long(mix: str, n: int, row: dict[str, Outcome]) -> list[str]:
    tps = {k: v.tps for k, v in row.items()}
    best_static = max(tps["always-mtp"], tps["always-plain"])
    margin = tps["per-class"] - best_static
    share = (tps["specroute"] - best_static) / margin if margin > 0 else math.nan
    print(f"  {n} requests, 1 client: specroute/best static {tps['specroute'] / best_static:.3f},"
          f" per-class/best static {tps['per-class'] / best_static:.3f}, oracle/best static "
          f"{tps['oracle'] / best_static:.3f}; specroute took {share:.0%} of the per-class margin")
    return [] if share >= 0.6 or margin <= 0 else [f"{mix} {n} requests: {share:.0%} of margin"]


if __name__ == "__main__":
    sys.exit(main())
