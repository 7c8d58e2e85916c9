"""The backends as the router sees them at run time: health, load, and where to send bytes.

Health comes from two places: the supervisor's probes (`set_health`) and what requests observe
(`mark_failed` after a refused connection or a 5xx). A backend marked failed by a request is
skipped for `retry_after_s`, then tried again, so that a dead instance costs one failed connect
per interval rather than one per request.

Load is the router's own in-flight work plus what others put on an instance:
- the other replicas' requests, each as its replica priced it and timed from when it was sent
  (`note_replica_work`, published by each replica as its requests start and end, within a few
  ms: router/replicas/link), so that N replicas see the queues one process would;
- requests that bypass every replica (clients sent straight to an engine): what the engine's own
  queue gauges (`note_engine_load`, scraped by router/instances/engine_load) count beyond every replica's
  requests, priced at the instance's typical request.
Each is trusted only while fresh (`load_max_age_s`): a replica that stopped publishing, or a
gauge that stopped answering, no longer counts.

Replicas that know each other split the instances into shares (`share_with`): each takes its own
first among equals, and a free instance in another's share costs it the collision risk it has
measured there (router/instances/contention).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import NamedTuple

from aiohttp import web

from backends.gauges import EngineLoad
from backends.spec import BackendSpec
from backends.upstream import Target
from policies import (
    IDLE_QUEUE,
    NOTHING_BEHIND,
    BackendState,
    Behind,
    Queued,
    Running,
    batch_work,
    queued_work,
)
from router.instances.contention import Contention, ranks, share

# A request's predicted service time, averaged per instance with this weight for the newest: the
# price of a request someone else put there (its own prediction is not known here).
TYPICAL_WEIGHT = 0.1
# The recent decisions whose losses had an instance been taken price a request's holding it
# (`Behind`): enough to hold a mix's proportions, few enough to follow a change of traffic.
BEHIND_WINDOW = 32


# one replica's requests in flight as it publishes them: instance -> [(predicted ms, ms since
# it was sent[, sd of the log of its length, ms at its max_tokens])] (elapsed rather than
# sent: the replicas' clocks need not agree; the last two when its spread is known, as
# `Running`'s, so that every replica prices its time left alike)
ReplicaLoad = dict[str, list[tuple[float, ...]]]


@dataclass(slots=True)
class ReplicaWork:
    """Another replica's requests on one instance, as it last published them."""

    running: list[Running]
    at: float  # when that was heard


@dataclass(slots=True)
class BackendRuntime:
    spec: BackendSpec
    probe_healthy: bool = True
    failed_until: float = 0.0
    inflight: int = 0
    last_error: str = ""
    served: int = 0
    failures: int = 0
    started: int = 0  # requests ever sent here (tells whether two requests overlapped)
    # ticket -> this replica's requests here: the queue the finish rule prices
    running: dict[int, Running] = field(default_factory=dict)
    typical_ms: float = 0.0  # the predicted service time of a request here, averaged
    # when a request here last ended (this replica's, another's as heard, or a bypasser's as
    # counted): the oldest one still here has been served only since then
    freed_at: float = -math.inf
    replicas: dict[str, ReplicaWork] = field(default_factory=dict)  # the other replicas' work
    gauge: EngineLoad | None = None  # the engine's own count, at its last good scrape
    bypass: int = 0  # what that count showed beyond every replica's requests
    gauge_at: float = -1e18
    # when each bypassing request was first seen, oldest first: their elapsed time, as for the
    # replicas' own (one that has run long is nearly done, not a whole request more)
    bypass_seen: list[float] = field(default_factory=list)
    # ticket -> when it was sent: this replica's requests sent here blind (the instance free as
    # far as it knew, other replicas about), watched for a collision until they end
    blind: dict[int, float] = field(default_factory=dict)
    # what the recent decisions' requests (wherever they went) would have lost had this
    # instance been taken
    losses_ms: deque[float] = field(default_factory=lambda: deque(maxlen=BEHIND_WINDOW))
    _behind: Behind | None = None  # `behind()`, until a loss is added
    # requests it serves at once, where that count came from (`set_slots`), and what
    # contradicted the declared count (shown on /readyz)
    slots: int = 1
    slots_source: str = "default"
    slots_warning: str = ""
    # the batch: requests served at once now (every replica's and bypasser's, capped at its
    # slots), its integral over time since `level_at`, and per ticket of this replica's the
    # integral and the level when it was sent (its record's mean batch: `end`)
    level: int = 0
    area: float = 0.0
    level_at: float = 0.0
    marks: dict[int, tuple[float, float, int]] = field(default_factory=dict)

    def add_loss(self, loss_ms: float) -> None:
        self.losses_ms.append(loss_ms)
        self._behind = None

    def behind(self) -> Behind:
        if self._behind is None:
            self._behind = Behind.of(self.losses_ms)
        return self._behind

    def healthy(self, now: float) -> bool:
        return self.probe_healthy and now >= self.failed_until

    def freed(self, now: float) -> None:
        """A request here ended at `now`: the next one in line is served from then."""
        self.freed_at = max(self.freed_at, now)

    def replicas_running(self, now: float, max_age_s: float) -> list[Running]:
        """The other replicas' requests here, from those heard from recently."""
        return [r for work in self.replicas.values() if now - work.at <= max_age_s
                for r in work.running]

    def bypassing(self, now: float, max_age_s: float) -> int:
        return self.bypass if now - self.gauge_at <= max_age_s else 0

    def known(self, now: float, max_age_s: float) -> int:
        """Every replica's requests here: this one's and the others' as published."""
        return self.inflight + len(self.replicas_running(now, max_age_s))

    def relevel(self, now: float, max_age_s: float) -> None:
        """The batch as it is from `now`: the integral so far taken at the old level."""
        if now > self.level_at:
            self.area += self.level * (now - self.level_at)
            self.level_at = now
        every = self.known(now, max_age_s) + self.bypassing(now, max_age_s)
        self.level = min(every, self.slots)

    def batch_of(self, ticket: int, now: float) -> Batch | None:
        """The batch the request `ticket` ran in, up to `now` (None: not one of its own)."""
        mark = self.marks.pop(ticket, None)
        if mark is None:
            return None
        area, sent, start = mark
        lasted = now - sent
        mean = (self.area + self.level * max(now - self.level_at, 0.0) - area) / lasted \
            if lasted > 0 else float(start)
        return Batch(start, min(max(mean, 1.0), float(self.slots)))


class Batch(NamedTuple):
    """The batch a request ran in: requests served at once on its instance when it was sent,
    itself included, and their mean over its life (capped at the instance's slots)."""

    start: int
    mean: float


class BackendPool:
    def __init__(
        self,
        specs: Iterable[BackendSpec],
        *,
        retry_after_s: float = 5.0,
        pools: Mapping[str, Iterable[str]] | None = None,
        load_max_age_s: float = 1.0,
    ) -> None:
        self._backends = {spec.name: BackendRuntime(spec, slots=spec.slots or 1,
                                                     slots_source="declared" if spec.slots
                                                     else "default")
                          for spec in specs}
        self._targets = {name: self._target(b.spec) for name, b in self._backends.items()}
        self._retry_after_s = retry_after_s
        self._load_max_age_s = load_max_age_s
        self._tickets = count(1)
        self._watchers: list[Callable[[], None]] = []
        self._tie_rank = {name: i for i, name in enumerate(self._backends)}
        self._me = ""  # this replica's id, once it shares the instances with others
        self._everyone: list[str] = []  # the replicas the shares were dealt among
        self._own = frozenset(self._backends)  # its share: all of them while alone
        self._owner: dict[str, str] = {}  # instance -> the replica whose share it is in
        self.contention = Contention()
        # backend -> the named pools it belongs to (config.yaml `pools`)
        self._pools = {
            name: frozenset(p for p, members in (pools or {}).items() if name in members)
            for name in self._backends
        }
        self._idle = self._idle_states()

    @property
    def names(self) -> list[str]:
        return list(self._backends)

    def runtime(self, name: str) -> BackendRuntime:
        return self._backends[name]

    def states(self, now: float) -> list[BackendState]:
        states = []
        fallback_ms: float | None = None  # asked for only when someone else's work is seen
        own, idle = self._own, self._idle
        for b in self._backends.values():
            if not (b.running or b.replicas or b.bypass) and b.spec.name in own:
                # nothing on it, no one else's: the state built once (most instances, most
                # of the time)
                states.append(idle[b.spec.name][b.healthy(now)])
                continue
            # every decision reads every instance's queue: summed up here, not one object per
            # request in flight
            running: Collection[Running] = b.running.values()
            if b.replicas:  # as each replica priced its own
                running = [*running, *b.replicas_running(now, self._load_max_age_s)]
            bypass = b.bypassing(now, self._load_max_age_s)
            if bypass:  # priced at the instance's typical request, timed from when first seen
                if not b.typical_ms and fallback_ms is None:
                    fallback_ms = self._mean_typical_ms()
                typical = b.typical_ms or fallback_ms or 0.0
                running = [*running, *(Running(typical, seen) for seen in b.bypass_seen[:bypass])]
            contended = 0.0 if running or b.spec.name in self._own else self.contention.risk()
            queued = (batch_work(running, now, b.slots) if b.slots > 1
                      else queued_work(running, now, b.freed_at))
            states.append(self._state(b, b.healthy(now), queued, contended))
        return states

    def _state(self, b: BackendRuntime, healthy: bool, queued: Queued,
               contended: float = 0.0) -> BackendState:
        name = b.spec.name
        return BackendState(name, b.spec.profile, healthy, queued.requests,
                            pools=self._pools[name], queued=queued,
                            tie_rank=self._tie_rank[name], contended=contended,
                            spec=b.spec.spec_key,
                            # read only while requests are on it: built then, not per decision
                            behind=b.behind() if queued.requests else NOTHING_BEHIND,
                            slots=b.slots)

    def _idle_states(self) -> dict[str, tuple[BackendState, BackendState]]:
        """Each instance's state while nothing runs on it, (unhealthy, healthy)."""
        return {name: (self._state(b, False, IDLE_QUEUE), self._state(b, True, IDLE_QUEUE))
                for name, b in self._backends.items()}

    def _mean_typical_ms(self) -> float:
        known = [b.typical_ms for b in self._backends.values() if b.typical_ms > 0]
        return sum(known) / len(known) if known else 0.0

    def known_inflight(self, name: str, now: float) -> int:
        """Every replica's requests on `name`, as this one knows them (a scrape's baseline)."""
        return self._backends[name].known(now, self._load_max_age_s)

    def note_engine_load(self, name: str, load: EngineLoad, now: float,
                         known_at_send: int = 0) -> None:
        """The engine's own queue gauges, just read: what they count beyond every replica's
        requests bypassed them all. The replicas' are counted as the most known in flight while
        the scrape was out (`known_at_send`, or now): a request that ended meanwhile may still
        be in the engine's count, and is not taken for a bypasser; one the engine has not seen
        yet makes this low, never high."""
        backend = self._backends[name]
        backend.gauge, backend.gauge_at = load, now
        known = max(backend.known(now, self._load_max_age_s), known_at_send)
        bypass = max(0, load.requests - known)
        if bypass < backend.bypass:
            backend.freed(now)
        backend.relevel(now, self._load_max_age_s)  # the integral at the old count first
        backend.bypass = bypass
        _seen(backend.bypass_seen, backend.bypass, now)
        backend.relevel(now, self._load_max_age_s)

    def note_replica_work(self, replica: str, work: ReplicaLoad, now: float,
                          blind_s: float = 0.0) -> None:
        """Another replica's requests in flight, as it just published them: per instance, each
        request's (predicted ms, ms since it was sent[, its length's spread, its ms at
        max_tokens]). An instance it does not name has none of its requests."""
        for name, backend in self._backends.items():
            running = [Running(item[0], now - item[1] / 1000.0, *item[2:4])
                       for item in work.get(name, ())]
            # one of its requests here ended when their count dropped (the sent times, rebuilt
            # from elapsed times at each hearing, move by the channel's jitter: no sign of an end)
            before = backend.replicas.get(replica)
            if before is not None and len(running) < len(before.running):
                backend.freed(now)
            backend.relevel(now, self._load_max_age_s)
            backend.replicas[replica] = ReplicaWork(running, now)
            backend.relevel(now, self._load_max_age_s)
            if backend.blind and running:
                self._collided(backend, min(r.sent for r in running), blind_s)
        self.refresh_shares(now)

    def _collided(self, backend: BackendRuntime, others_first: float, blind_s: float) -> None:
        """Another replica's request here started at `others_first` (as heard: late by the
        channel's latency): this replica's blind requests met it if they were sent after it, or
        so soon before it (within `blind_s`) that the other could not know of them."""
        for ticket, sent in list(backend.blind.items()):
            if others_first < sent + blind_s:
                del backend.blind[ticket]
                self.contention.observe(collided=True)

    def share_with(self, me: str) -> None:
        """This replica is `me`: it deals the instances out with the replicas it hears from."""
        self._me = me

    def refresh_shares(self, now: float) -> None:
        """Forget the replicas not heard from lately (they come and go: new pod names), and deal
        the shares again when the replicas heard from changed."""
        live: set[str] = set()
        for backend in self._backends.values():
            for gone in [r for r, w in backend.replicas.items()
                         if now - w.at > self._load_max_age_s]:
                del backend.replicas[gone]
            live.update(backend.replicas)
        everyone = sorted({self._me, *live}) if self._me else []
        if everyone != self._everyone:
            self._everyone = everyone
            self._deal(everyone.index(self._me) if everyone else 0, max(1, len(everyone)))

    def _deal(self, position: int, replicas: int) -> None:
        names = list(self._backends)
        profiles = [b.spec.profile for b in self._backends.values()]
        self._own = share(names, profiles, position, replicas)
        self._tie_rank = ranks(names, self._own)
        self._idle = self._idle_states()
        self._owner = {name: replica for i, replica in enumerate(self._everyone)
                       for name in share(names, profiles, i, replicas)}

    def others(self) -> list[str]:
        """The other replicas the shares were last dealt among."""
        return [replica for replica in self._everyone if replica != self._me]

    def owner(self, name: str) -> str:
        """The replica whose share `name` is in, as last dealt ("" while alone)."""
        return self._owner.get(name, "")

    def lost_others(self, replica: str = "", keep: Collection[str] = ()) -> None:
        """The channel that told the other replicas' work broke (but for those in `keep`, told
        otherwise), or with `replica` the stream from that one: what it last told stops
        counting at once (those requests end unheard; the engines' gauges show them from their
        next read), and the shares stay as dealt (the others are unheard, not gone)."""
        for backend in self._backends.values():
            for name, work in backend.replicas.items():
                if (not replica or name == replica) and name not in keep:
                    work.at = -math.inf
            backend.blind.clear()  # whether they met the others' requests can no longer be told

    def others_unheard(self, now: float) -> bool:
        """Whether this replica shares the instances with others (the shares last dealt) and
        has heard none of them within `load_max_age_s`: the store or its channel is down, and
        the engines' gauges are all it sees of the others' requests."""
        return len(self._everyone) > 1 and not any(
            now - work.at <= self._load_max_age_s
            for backend in self._backends.values() for work in backend.replicas.values())

    def others_inflight(self, name: str, now: float) -> int:
        """Requests on `name` that this replica did not send, as last seen and still fresh."""
        backend = self._backends[name]
        return (len(backend.replicas_running(now, self._load_max_age_s))
                + backend.bypassing(now, self._load_max_age_s))

    def own_work(self, now: float) -> ReplicaLoad:
        """This replica's requests in flight, to publish: per instance, each request's
        (predicted ms, ms since it was sent[, its spread, its ms at max_tokens]), so the
        others price them as this one does."""
        return {name: [_published(r, now) for r in b.running.values()]
                for name, b in self._backends.items() if b.running}

    def watch(self, on_change: Callable[[], None]) -> Callable[[], None]:
        """Call `on_change` whenever this replica's own in-flight work changes; returns what
        stops it (the store's publisher watches for good, each peer's stream while it lasts)."""
        self._watchers.append(on_change)
        return lambda: self._watchers.remove(on_change)

    def _changed(self) -> None:
        for on_change in self._watchers:
            on_change()

    def default_order(self, default: str, now: float) -> list[str]:
        """Where a request that is not routed goes: the default backend, then the healthy
        others (health alone: no queue is summed up for it)."""
        return [default, *(name for name, b in self._backends.items()
                           if name != default and b.healthy(now))]

    def any_healthy(self, now: float) -> bool:
        return any(b.healthy(now) for b in self._backends.values())

    def targets(self, names: Sequence[str]) -> list[Target]:
        targets = self._targets
        return [targets[n] for n in names if n in targets]

    def set_health(self, name: str, healthy: bool, error: str = "") -> None:
        backend = self._backends[name]
        backend.probe_healthy = healthy
        if healthy:
            backend.failed_until = 0.0  # a restarted backend takes traffic at once
        else:
            backend.last_error = error or backend.last_error

    def mark_failed(self, name: str, now: float, error: str) -> None:
        backend = self._backends.get(name)
        if backend is not None:
            backend.failed_until = now + self._retry_after_s
            backend.last_error = error
            backend.failures += 1

    def mark_served(self, name: str) -> None:
        backend = self._backends.get(name)
        if backend is not None:
            backend.served += 1
            backend.failed_until = 0.0

    def begin(self, name: str, predicted_ms: float = 0.0, now: float = 0.0, *,
              spread: float = 0.0, most_ms: float = 0.0) -> int:
        """A request sent to `name`, predicted to take `predicted_ms` once served (its length's
        log-sd `spread`, `most_ms` at its max_tokens: `Decision.tokens_sd`, `most_ms`);
        returns the ticket that `end` takes."""
        ticket = next(self._tickets)
        if name in self._backends:
            backend = self._backends[name]
            # watched only while the others are heard: unheard, a collision cannot be told
            # from none, and every blind request would count as none
            if len(self._everyone) > 1 and not backend.known(now, self._load_max_age_s) and (
                    not backend.bypassing(now, self._load_max_age_s)) and (
                    not self.others_unheard(now)):
                backend.blind[ticket] = now
            backend.relevel(now, self._load_max_age_s)
            backend.inflight += 1
            backend.started += 1
            backend.running[ticket] = Running(predicted_ms, now, spread, most_ms)
            backend.relevel(now, self._load_max_age_s)
            backend.marks[ticket] = (backend.area, now, backend.level)
            if predicted_ms > 0:
                backend.typical_ms = (predicted_ms if backend.typical_ms <= 0 else
                                      backend.typical_ms + TYPICAL_WEIGHT
                                      * (predicted_ms - backend.typical_ms))
            self._changed()
        return ticket

    def note_losses(self, losses_ms: Mapping[str, float]) -> None:
        """A decision's losses had each instance been taken (`Decision.losses_ms`): the price
        of holding that instance while the next requests come."""
        for name, loss in losses_ms.items():
            backend = self._backends.get(name)
            if backend is not None:
                backend.add_loss(loss)

    def end(self, name: str, ticket: int, now: float) -> Batch | None:
        """The request `ticket` sent to `name` ended at `now` (its answer in, or given up):
        the batch it ran in (None: not a request of this pool's)."""
        backend = self._backends.get(name)
        if backend is None:
            return None
        backend.freed(now)
        backend.relevel(now, self._load_max_age_s)
        batch = backend.batch_of(ticket, now)
        backend.inflight -= 1
        backend.running.pop(ticket, None)
        backend.relevel(now, self._load_max_age_s)
        if backend.blind.pop(ticket, None) is not None:  # it met no other replica's request
            self.contention.observe(collided=False)
        self._changed()
        return batch

    def set_slots(self, name: str, slots: int, source: str, warning: str = "") -> None:
        """How many requests `name` serves at once, and where that count came from (`source`:
        declared, engine, launch, ...); `warning`: what contradicted the declared count."""
        backend = self._backends.get(name)
        if backend is None or slots < 1:
            return
        backend.slots, backend.slots_source, backend.slots_warning = slots, source, warning
        self._idle = self._idle_states()

    def describe(self, now: float) -> list[dict[str, object]]:
        return [
            {
                "name": b.spec.name,
                "profile": b.spec.profile,
                "speculation": b.spec.spec_key,
                "pools": sorted(self._pools[b.spec.name]),
                "engine": b.spec.engine,
                "url": b.spec.base_url,
                "healthy": b.healthy(now),
                "inflight": b.inflight,
                "slots": b.slots,
                "slots_source": b.slots_source,
                **({"slots_warning": b.slots_warning} if b.slots_warning else {}),
                "others_inflight": self.others_inflight(b.spec.name, now),
                "own_share": b.spec.name in self._own,  # taken first among the replicas
                "engine_gauges": (None if b.gauge is None else
                                  {"running": b.gauge.running, "waiting": b.gauge.waiting,
                                   "age_s": round(now - b.gauge_at, 3)}),
                "served": b.served,
                "failures": b.failures,
                "last_error": b.last_error,
            }
            for b in self._backends.values()
        ]

    @staticmethod
    def _target(spec: BackendSpec) -> Target:
        return Target(spec.name, spec.profile, spec.base_url, spec.api_key, spec.spec_key)


def _seen(seen: list[float], count: int, now: float) -> None:
    """Others' requests as now counted: the oldest are the ones that ended (an instance serves
    them in turn), new ones are seen from now."""
    del seen[:max(0, len(seen) - count)]
    seen.extend([now] * (count - len(seen)))


POOL = web.AppKey("pool", BackendPool)


def _published(request: Running, now: float) -> tuple[float, ...]:
    """One request in flight as `own_work` tells it: its spread and cap only when known (a
    replica of an older release reads the first two)."""
    elapsed_ms = max(0.0, (now - request.sent) * 1000.0)
    if request.spread > 0.0:
        return request.predicted_ms, elapsed_ms, request.spread, request.most_ms
    return request.predicted_ms, elapsed_ms
