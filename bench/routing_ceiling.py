"""What routing could gain over least connections on instances that batch, in a closed loop:
a simulation fitted to decision logs, where one measured run cannot say it (issue 50).

A 24-request run of bench.arms gives one makespan per arm, and one such run's ratio to least
connections moves by several percent with the order of the requests alone. So the question
"can any router beat least connections by 5% here?" is asked of a simulation instead:

- **The paces.** From the logs (the static arms' are best: every instance under every mix),
  per instance and class, log(s per token) = a level + per class k, a slope x log(1 + the
  requests of class k beside it on its instance), the neighbours' mean over its life
  (`bench.prediction_ceiling.Lived.beside_mean`; the whole request, its prefill included).
  On llama-server's n-gram instance a story beside copy edits slows with their drafts; a batch
  is not only its size.
- **The loop.** `clients` closed-loop clients take the next request of a sequence (bench.arms'
  order: one shared list); each instance serves `slots` at once, the rest wait in turn; each
  running request advances at its pace given who runs beside it now.
- **The routers.** least connections (ties in turn, as bench.arms'); each instance alone;
  bench.arms' hand rules (the class an instance serves fastest alone always there, the rest
  there below K in flight); the best router of the present, a rollout: each choice simulated to
  the end, least connections after it, over futures drawn from the mix, knowing what runs where,
  how far along, and the simulation's own paces (no router knows that much); the clairvoyant,
  a local search over every request's instance knowing the whole sequence.

Measured makespans (`--arms`, bench.arms' `--json`) are printed beside the simulated ones: the
simulation is trusted as far as it matches the routers it was not fitted on.

    python -m bench.routing_ceiling LOG [LOG ...] [--arms JSON] [--clients 4 8] [--slots 4]

Pure but for `main`: no clock; each random draw from a seeded generator.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

import numpy as np

from bench.arms import LeastConn
from bench.prediction_ceiling import Lived, lived_requests
from decisionlog.readers import iter_log_records


class Held(NamedTuple):
    """A request on an instance as a router sees it: its class, the tokens it has left, and
    whether it runs (else it waits for a slot)."""

    cls: str
    left: float
    running: bool


# What a router sees when it places a request: per instance, the requests on it, running first.
Placed = Mapping[str, Sequence[Held]]
Router = Callable[[str, Placed], str]
RouterFactory = Callable[[], Router]

FUTURES: Final = 8  # futures drawn per choice by the rollout
CLAIRVOYANT_STARTS: Final = 2  # random starts of the local search, beside the rollout's choices


@dataclass(frozen=True)
class Paces:
    """Seconds per token of a request of class c on instance i, given its neighbours there."""

    instances: tuple[str, ...]
    classes: tuple[str, ...]
    weights: Mapping[tuple[str, str], tuple[float, ...]]  # level, then a slope per class
    tokens: Mapping[str, float]  # a request's tokens, per class (the logs' median)
    share: Mapping[str, float]  # each class's share of the requests
    # one slope on log(1 + every request beside it), whatever their classes (the weights' first
    # slope): the batch's size only, as the route model prices it
    size_only: bool = False

    def seconds_per_token(self, instance: str, cls: str, beside: Mapping[str, int]) -> float:
        level, *slopes = self.weights[instance, cls]
        if self.size_only:
            return math.exp(level + slopes[0] * math.log1p(sum(beside.values())))
        return math.exp(level + sum(s * math.log1p(beside.get(k, 0))
                                    for s, k in zip(slopes, self.classes, strict=True)))

    def alone(self, instance: str, cls: str) -> float:
        return self.seconds_per_token(instance, cls, {})


class FitError(ValueError):
    """The logs cannot be fitted (too few instances, classes or requests)."""


# Each instance and class's slopes are drawn towards its instance's (fitted over every class)
# with the weight of this many requests: a class seldom beside another leaves that slope to them.
POOLED_WEIGHT: Final = 8.0


def fit_paces(lived: Sequence[Lived]) -> Paces:
    """Least squares per instance and class over the requests that lived, no slope below 0,
    each drawn towards its instance's (`POOLED_WEIGHT`)."""
    instances = tuple(sorted({r.instance for r in lived}))
    classes = tuple(sorted({r.cls for r in lived}))
    if len(instances) < 2:
        raise FitError(f"the logs name {len(instances)} instance(s): routing needs two")
    weights = {}
    for instance in instances:
        mine = [r for r in lived if r.instance == instance]
        missing = sorted(set(classes) - {r.cls for r in mine})
        if missing:
            raise FitError(f"no request of class {', '.join(map(repr, missing))} on "
                           f"{instance!r}: the static arms' logs serve every class on each "
                           "instance")
        beside = np.array([[math.log1p(r.beside(k, future=True)) for k in classes]
                           for r in mine])
        levels = np.array([[float(r.cls == c) for c in classes] for r in mine])
        logs = np.array([math.log(r.total_ms / 1000.0 / r.tokens) for r in mine])
        pooled = _slowing_fit(np.hstack([levels, beside]), logs, len(classes))[len(classes):]
        for k, cls in enumerate(classes):
            rows = np.hstack([np.ones((len(mine), 1)), beside])[levels[:, k] == 1.0]
            drawn = math.sqrt(POOLED_WEIGHT) * np.hstack([np.zeros((len(classes), 1)),
                                                          np.eye(len(classes))])
            weights[instance, cls] = _slowing_fit(
                np.vstack([rows, drawn]),
                np.concatenate([logs[levels[:, k] == 1.0],
                                math.sqrt(POOLED_WEIGHT) * np.array(pooled)]), 1)
    tokens = {c: statistics.median(r.tokens for r in lived if r.cls == c) for c in classes}
    share = {c: sum(r.cls == c for r in lived) / len(lived) for c in classes}
    return Paces(instances, classes, weights, tokens, share)


def fit_batch_size(lived: Sequence[Lived], paces: Paces) -> Paces:
    """The paces as the route model has them: a level per instance and class and one slope per
    instance on log(1 + the requests beside it), whatever their classes (least squares over
    the requests `paces` was fitted on, keeping its tokens and shares)."""
    weights = {}
    for instance in paces.instances:
        mine = [r for r in lived if r.instance == instance]
        rows = np.array([[*(float(r.cls == c) for c in paces.classes),
                          math.log1p(sum(r.beside(c, future=True) for c in paces.classes))]
                         for r in mine])
        logs = np.array([math.log(r.total_ms / 1000.0 / r.tokens) for r in mine])
        fitted = _slowing_fit(rows, logs, len(paces.classes))
        for k, cls in enumerate(paces.classes):
            weights[instance, cls] = (fitted[k], fitted[-1], *([0.0] * (len(paces.classes) - 1)))
    return Paces(paces.instances, paces.classes, weights, paces.tokens, paces.share,
                 size_only=True)


def _slowing_fit(rows: np.ndarray, logs: np.ndarray, free: int) -> tuple[float, ...]:
    """Least squares with every column after the first `free` (the slopes) at least 0: a
    neighbour never makes a request faster. Exact for a few slopes: the best of the fits on
    each set of them left free (the others 0) whose slopes all come out non-negative."""
    best: tuple[float, tuple[float, ...]] | None = None
    slopes = range(free, rows.shape[1])
    for kept in itertools.chain.from_iterable(itertools.combinations(slopes, n)
                                              for n in range(len(slopes) + 1)):
        columns = [*range(free), *kept]
        fitted = np.linalg.lstsq(rows[:, columns], logs, rcond=None)[0]
        if any(w < 0.0 for w in fitted[free:]):
            continue
        weights = np.zeros(rows.shape[1])
        weights[columns] = fitted
        residual = float(np.sum((rows @ weights - logs) ** 2))
        if best is None or residual < best[0]:
            best = (residual, tuple(float(w) for w in weights))
    assert best is not None  # every slope at 0 is always a candidate
    return best[1]


class Run(NamedTuple):
    makespan: float  # s, from the first request sent to the last answered
    choices: tuple[str, ...]  # each request's instance, in the sequence's order


@dataclass(eq=False, slots=True)
class _Serving:
    """A request on an instance (running or waiting): its class and the tokens it has left."""

    cls: str
    left: float


def simulate(paces: Paces, sequence: Sequence[str], clients: int, slots: int,
             router: Router, forced: Sequence[str] = ()) -> Run:
    """The closed loop: each client sends the next request of `sequence` when its last is
    answered; the first `len(forced)` go where `forced` says, the rest where `router` says."""
    running: dict[str, list[_Serving]] = {i: [] for i in paces.instances}
    waiting: dict[str, list[_Serving]] = {i: [] for i in paces.instances}
    choices: list[str] = []
    now = 0.0

    def send() -> None:
        cls = sequence[len(choices)]
        if len(choices) < len(forced):
            instance = forced[len(choices)]
        else:
            instance = router(cls, {i: [*(Held(r.cls, r.left, True) for r in running[i]),
                                        *(Held(r.cls, r.left, False) for r in waiting[i])]
                                    for i in paces.instances})
        choices.append(instance)
        queue = running[instance] if len(running[instance]) < slots else waiting[instance]
        queue.append(_Serving(cls, paces.tokens[cls]))

    for _ in range(min(clients, len(sequence))):
        send()
    while any(running.values()):
        rates = {i: _rates(paces, i, running[i]) for i in paces.instances}
        step = min(_next_end(running[i], rates[i]) for i in paces.instances if running[i])
        now += step
        answered = sum(len(_advance(running[i], waiting[i], rates[i], step))
                       for i in paces.instances)
        for _ in range(answered):
            if len(choices) < len(sequence):
                send()
    return Run(now, tuple(choices))


def _rates(paces: Paces, instance: str, running: Sequence[_Serving]) -> list[float]:
    """Tokens per second of each running request, given who runs beside it."""
    counts: dict[str, int] = {}
    for r in running:
        counts[r.cls] = counts.get(r.cls, 0) + 1
    return [1.0 / paces.seconds_per_token(
                instance, r.cls, {**counts, r.cls: counts[r.cls] - 1}) for r in running]


def _next_end(running: Sequence[_Serving], rates: Sequence[float]) -> float:
    return min(r.left / rate for r, rate in zip(running, rates, strict=True))


def _advance(running: list[_Serving], waiting: list[_Serving], rates: Sequence[float],
             step: float) -> list[_Serving]:
    """`step` seconds on: the requests that end, each one's slot given to the first waiting."""
    for r, rate in zip(running, rates, strict=True):
        r.left -= rate * step
    done = [r for r in running if r.left <= 1e-9]
    for r in done:
        running.remove(r)
        if waiting:
            running.append(waiting.pop(0))
    return done


def drained(paces: Paces, instance: str, held: Sequence[Held], slots: int) -> list[float]:
    """When each of `held` ends (s from now) if nothing more came to `instance`."""
    requests = [_Serving(h.cls, h.left) for h in held]
    running = [r for r, h in zip(requests, held, strict=True) if h.running]
    waiting = [r for r, h in zip(requests, held, strict=True) if not h.running]
    while waiting and len(running) < slots:
        running.append(waiting.pop(0))
    ends: dict[int, float] = {}
    now = 0.0
    while running:
        rates = _rates(paces, instance, running)
        step = _next_end(running, rates)
        now += step
        for r in _advance(running, waiting, rates, step):
            ends[id(r)] = now
    return [ends[id(r)] for r in requests]


def least_connections(instances: Sequence[str]) -> RouterFactory:
    """bench.arms' own LeastConn (the fewest in flight, ties in turn), told what is in flight."""
    def factory() -> Router:
        chooser = LeastConn(instances)

        def route(cls: str, placed: Placed) -> str:
            chooser.inflight = {i: len(placed[i]) for i in instances}
            return chooser.pick()
        return route
    return factory


def alone(instance: str) -> RouterFactory:
    return lambda: lambda cls, placed: instance


def hand_rule(paces: Paces, threshold: int) -> RouterFactory:
    """bench.arms' HandRule, read off the paces: the class one instance serves fastest alone
    against the other (n-gram's copy edits) always there; any other request there too while
    fewer than `threshold` are in flight there, else to the other instance."""
    fast, slow, favoured = favourite(paces)

    def route(cls: str, placed: Placed) -> str:
        return fast if cls == favoured or len(placed[fast]) < threshold else slow
    return lambda: route


def favourite(paces: Paces) -> tuple[str, str, str]:
    """(the instance, the other, the class) of the largest gain alone, of two instances."""
    a, b = paces.instances[:2]
    gains = [(paces.alone(slow, c) / paces.alone(fast, c), fast, slow, c)
             for fast, slow in ((a, b), (b, a)) for c in paces.classes]
    _, fast, slow, cls = max(gains)
    return fast, slow, cls


def cost_rule(paces: Paces, slots: int) -> RouterFactory:
    """specroute's rule with the simulation's exact paces: each request where its own finish
    plus what it adds to the requests already there is least, none coming after it (bench.
    batching's `Clairvoyant`, a closed loop's form)."""
    def route(cls: str, placed: Placed) -> str:
        def cost(instance: str) -> float:
            before = drained(paces, instance, placed[instance], slots)
            after = drained(paces, instance,
                            [*placed[instance], Held(cls, paces.tokens[cls], False)], slots)
            return after[-1] + sum(a - b for a, b in zip(after, before, strict=False))
        return min(paces.instances, key=cost)
    return lambda: route


def rollout(paces: Paces, sequence: Sequence[str], clients: int, slots: int,
            rng: random.Random, horizon: int | None = None, futures: int = FUTURES) -> Run:
    """A router of the present at its best: each request placed where the simulation, run on
    with least connections after it, answers `horizon` more requests soonest, on average over
    `futures` draws of their classes (from the mix). It knows what runs where and how far
    along, and the simulation's own paces: more than a router can. `horizon` None: the
    requests left in the run, i.e. it knows when the run ends (a part of the future)."""
    base = least_connections(paces.instances)
    classes = list(paces.share)
    weights = [paces.share[c] for c in classes]
    forced: list[str] = []
    for sent in range(len(sequence)):
        more = len(sequence) - sent - 1 if horizon is None else horizon
        drawn = [[*sequence[:sent + 1], *rng.choices(classes, weights, k=more)]
                 for _ in range(futures)]
        forced.append(min(paces.instances, key=lambda i: sum(
            simulate(paces, future, clients, slots, base(), [*forced, i]).makespan
            for future in drawn)))
    return simulate(paces, sequence, clients, slots, base(), forced)


def clairvoyant(paces: Paces, sequence: Sequence[str], clients: int, slots: int,
                starts: Sequence[Sequence[str]]) -> Run:
    """The best placement found knowing the whole sequence: from each of `starts` (every
    request's instance), single and paired changes kept while they shorten the makespan. A
    local optimum: a floor under what knowing the future allows, not its ceiling."""
    base = least_connections(paces.instances)
    return min((_descend(paces, sequence, clients, slots, base, list(s)) for s in starts),
               key=lambda run: run.makespan)


def _descend(paces: Paces, sequence: Sequence[str], clients: int, slots: int,
             base: RouterFactory, choices: list[str]) -> Run:
    def makespan(placement: Sequence[str]) -> float:
        return simulate(paces, sequence, clients, slots, base(), placement).makespan

    best = makespan(choices)
    moves = [*((k,) for k in range(len(choices))),
             *itertools.combinations(range(len(choices)), 2)]
    improved = True
    while improved:
        improved = False
        for move in moves:
            trial = list(choices)
            for k in move:
                trial[k] = _other(paces.instances, trial[k])
            took = makespan(trial)
            if took < best - 1e-9:
                choices, best, improved = trial, took, True
                break
    return Run(best, tuple(choices))


def _other(instances: Sequence[str], instance: str) -> str:
    return instances[(instances.index(instance) + 1) % len(instances)]


def sequences(paces: Paces, requests: int, count: int, seed: int) -> list[list[str]]:
    """`count` orders of `requests` requests in the mix's shares (rounded), each shuffled."""
    counts = {c: round(requests * paces.share[c]) for c in paces.classes}
    counts[max(counts, key=counts.__getitem__)] += requests - sum(counts.values())
    pool = [c for c in paces.classes for _ in range(counts[c])]
    out = []
    for k in range(count):
        order = list(pool)
        random.Random(seed * 100_003 + k).shuffle(order)
        out.append(order)
    return out


@dataclass(frozen=True)
class Level:
    """One load's simulated runs, over the same orders of requests: each router's mean
    makespan (s), its ratios to least connections per order, its share of the favoured class
    on its instance."""

    clients: int
    makespan: Mapping[str, float]
    ratios: Mapping[str, tuple[float, ...]]
    favoured_share: Mapping[str, float]


COST_RULE: Final = "specroute's rule, exact"
SIZE_RULE: Final = "the same, by batch size"
PRESENT: Final = "present, its end unknown"
END_KNOWN: Final = "present, its end known"
CLAIRVOYANT: Final = "clairvoyant"


def level(paces: Paces, clients: int, slots: int, orders: Sequence[Sequence[str]],
          clairvoyant_orders: int, seed: int, by_size: Paces | None = None) -> Level:
    """Every router over `orders`; the clairvoyant over the first `clairvoyant_orders`. The
    router of the present is the best of three horizons (`clients`, twice that, the run's
    length) on these orders: picked in its favour. `by_size`: specroute's rule also priced with
    these paces (the batch's size only), the simulation still `paces`."""
    rng = random.Random(seed)
    fast, _, favoured = favourite(paces)
    routers: dict[str, RouterFactory] = {"least-conn": least_connections(paces.instances),
                                         **{i: alone(i) for i in paces.instances},
                                         **{f"hand-{k}": hand_rule(paces, k) for k in (0, 1, 2)},
                                         COST_RULE: cost_rule(paces, slots),
                                         **({SIZE_RULE: cost_rule(by_size, slots)}
                                            if by_size is not None else {})}
    runs: dict[str, list[Run]] = {
        name: [simulate(paces, o, clients, slots, factory()) for o in orders]
        for name, factory in routers.items()}
    horizons = sorted({clients, 2 * clients, max(len(o) for o in orders)})
    runs[PRESENT] = min(([rollout(paces, o, clients, slots, rng, h) for o in orders]
                         for h in horizons), key=lambda done: sum(r.makespan for r in done))
    runs[END_KNOWN] = [rollout(paces, o, clients, slots, rng) for o in orders]
    runs[CLAIRVOYANT] = [
        clairvoyant(paces, o, clients, slots, [
            known.choices, *([rng.choice(paces.instances) for _ in o]
                             for _ in range(CLAIRVOYANT_STARTS))])
        for o, known in zip(orders[:clairvoyant_orders], runs[END_KNOWN], strict=False)]
    lc = runs["least-conn"]
    return Level(
        clients,
        {name: statistics.fmean(r.makespan for r in done) for name, done in runs.items() if done},
        {name: tuple(base.makespan / r.makespan for base, r in zip(lc, done, strict=False))
         for name, done in runs.items() if done},
        {name: _share(orders, done, favoured, fast) for name, done in runs.items() if done})


def _share(orders: Sequence[Sequence[str]], done: Sequence[Run], cls: str,
           instance: str) -> float:
    mine = [i == instance for order, run in zip(orders, done, strict=False)
            for c, i in zip(order, run.choices, strict=True) if c == cls]
    return sum(mine) / len(mine) if mine else math.nan


def measured(arms: Path) -> dict[str, dict[str, float]]:
    """bench.arms' `--json` batch makespans, by load ("4 clients") and arm."""
    rows = json.loads(arms.read_text())
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        batch = row.get("batch") or {}
        if batch.get("makespan"):
            out[row["load"]] = {**batch["makespan"], **batch.get("hand", {})}
    return out


def report(paces: Paces, levels: Sequence[Level], slots: int,
           arms: Mapping[str, Mapping[str, float]] | None = None) -> str:
    fast, slow, favoured = favourite(paces)
    lines = ["paces fitted (s per token alone; slope on log(1 + each class beside it)):"]
    for (instance, cls), (level_, *slopes) in sorted(paces.weights.items()):
        beside = ", ".join(f"{k} {s:+.2f}" for k, s in zip(paces.classes, slopes, strict=True))
        lines.append(f"  {instance:>24} {cls:>10}: {math.exp(level_):.4f}  ({beside})")
    gain = paces.alone(slow, favoured) / paces.alone(fast, favoured)
    lines.append(f"the favoured class: {favoured} on {fast} ({gain:.2f}x faster alone than "
                 f"on {slow}); {slots} slots an instance")
    for lv in levels:
        lines.append(f"{lv.clients} clients: makespan x least connections' on the same orders "
                     f"(its mean {lv.makespan['least-conn']:.1f} s; 10th-90th percentile over "
                     f"the orders), share of {favoured} on {fast}")
        seen = (arms or {}).get(f"{lv.clients} clients", {})
        for name, ratios in lv.ratios.items():
            mean = statistics.fmean(ratios)
            low, high = np.percentile(ratios, [10, 90])
            line = (f"  {name:>26}  {mean:6.3f} ({low:.3f}-{high:.3f}, {len(ratios)} orders)"
                    f"  {lv.favoured_share[name]:5.0%}")
            arm = _arm_named(name, seen)
            if arm is not None and seen.get("least-conn"):
                line += f"   measured {seen['least-conn'] / seen[arm]:.3f} ({arm})"
            lines.append(line)
        if seen.get("auto") and seen.get("least-conn"):
            lines.append(f"  {'specroute':>26}  measured {seen['least-conn'] / seen['auto']:.3f}")
    return "\n".join(lines)


def _arm_named(name: str, seen: Mapping[str, float]) -> str | None:
    """The measured arm a simulated router stands for: its own name, or an instance's arm
    (bench.arms names an arm by its config, the logs by the instance)."""
    if name in seen:
        return name
    return next((arm for arm in seen if arm not in ("auto", "least-conn")
                 and not arm.startswith("hand-") and arm in name), None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.routing_ceiling",
        description="what routing could gain over least connections on instances that batch: "
                    "a closed-loop simulation fitted to decision logs")
    parser.add_argument("logs", nargs="+", type=Path,
                        help="decision logs to fit the paces on (the static arms' are best)")
    parser.add_argument("--arms", type=Path, help="bench.arms --json output: measured "
                        "makespans printed beside")
    parser.add_argument("--clients", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--requests", type=int, default=24, help="per run (bench.arms': 24)")
    parser.add_argument("--orders", type=int, default=40, help="request orders simulated")
    parser.add_argument("--clairvoyant-orders", type=int, default=8,
                        help="orders the (slow) clairvoyant search runs on")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    missing = [str(p) for p in [*args.logs, *([args.arms] if args.arms else [])]
               if not p.is_file()]
    if missing:
        print(f"bench.routing_ceiling: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    if min(args.clients) < 1 or args.slots < 1 or args.requests < 1 or args.orders < 1:
        print("bench.routing_ceiling: clients, slots, requests and orders must be >= 1",
              file=sys.stderr)
        return 2
    lived = lived_requests(iter_log_records(args.logs))
    try:
        paces = fit_paces(lived)
    except FitError as exc:
        print(f"bench.routing_ceiling: {exc}", file=sys.stderr)
        return 2
    by_size = fit_batch_size(lived, paces)
    orders = sequences(paces, args.requests, args.orders, args.seed)
    levels = [level(paces, c, args.slots, orders, args.clairvoyant_orders, args.seed, by_size)
              for c in args.clients]
    print(report(paces, levels, args.slots, measured(args.arms) if args.arms else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
