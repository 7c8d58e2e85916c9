"""The backends as the router sees them at run time: health, load, and where to send bytes.

Health comes from two places: the supervisor's probes (`set_health`) and what requests observe
(`mark_failed` after a refused connection or a 5xx). A backend marked failed by a request is
skipped for `retry_after_s`, then tried again, so that a dead instance costs one failed connect
per interval rather than one per request.

Load is the router's own in-flight work plus what others put on an instance: the engine's own
queue gauges (`note_engine_load`, scraped by router/engine_load) count every request there, so
what they show beyond this replica's in-flight requests is someone else's; for engines with no
gauges, the other replicas' published in-flight counts (`note_shared_inflight`, from
router/replicas). Either is trusted only while fresh (`load_max_age_s`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count

from backends.gauges import EngineLoad
from backends.spec import BackendSpec
from backends.upstream import Target
from policies import BackendState, queued_work

# A request's predicted service time, averaged per instance with this weight for the newest: the
# price of a request someone else put there (its own prediction is not known here).
TYPICAL_WEIGHT = 0.1


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
    # ticket -> (predicted service ms, when it was sent): the queue the finish rule prices
    running: dict[int, tuple[float, float]] = field(default_factory=dict)
    typical_ms: float = 0.0  # the predicted service time of a request here, averaged
    gauge: EngineLoad | None = None  # the engine's own count, at its last good scrape
    gauge_others: int = 0  # what that count showed beyond this replica's requests
    gauge_at: float = -1e18
    shared_others: int = 0  # other replicas' in-flight requests here (engines with no gauges)
    shared_at: float = -1e18
    # when each request others put here was first seen, oldest first: their elapsed time, as
    # for this replica's own (one that has run long is nearly done, not a whole request more)
    others_seen: list[float] = field(default_factory=list)

    def healthy(self, now: float) -> bool:
        return self.probe_healthy and now >= self.failed_until

    def others(self, now: float, max_age_s: float) -> int:
        """Requests on the instance that this replica did not send, as last seen."""
        if now - self.gauge_at <= max_age_s:
            return self.gauge_others
        if now - self.shared_at <= max_age_s:
            return self.shared_others
        return 0


class BackendPool:
    def __init__(
        self,
        specs: Iterable[BackendSpec],
        *,
        retry_after_s: float = 5.0,
        pools: Mapping[str, Iterable[str]] | None = None,
        load_max_age_s: float = 1.0,
    ) -> None:
        self._backends = {spec.name: BackendRuntime(spec) for spec in specs}
        self._targets = {name: self._target(b.spec) for name, b in self._backends.items()}
        self._retry_after_s = retry_after_s
        self._load_max_age_s = load_max_age_s
        self._tickets = count(1)
        # backend -> the named pools it belongs to (config.yaml `pools`)
        self._pools = {
            name: frozenset(p for p, members in (pools or {}).items() if name in members)
            for name in self._backends
        }

    @property
    def names(self) -> list[str]:
        return list(self._backends)

    def runtime(self, name: str) -> BackendRuntime:
        return self._backends[name]

    def states(self, now: float) -> list[BackendState]:
        states = []
        fallback_ms: float | None = None  # asked for only when someone else's work is seen
        for b in self._backends.values():
            # every decision reads every instance's queue: summed up here, not one object per
            # request in flight
            others = b.others(now, self._load_max_age_s)
            running: Collection[tuple[float, float]] = b.running.values()
            if others:  # priced at the instance's typical request, timed from when first seen
                if not b.typical_ms and fallback_ms is None:
                    fallback_ms = self._mean_typical_ms()
                typical = b.typical_ms or fallback_ms or 0.0
                running = [*running, *((typical, seen) for seen in b.others_seen[:others])]
            states.append(BackendState(b.spec.name, b.spec.profile, b.healthy(now),
                                       b.inflight + others, pools=self._pools[b.spec.name],
                                       queued=queued_work(running, now)))
        return states

    def _mean_typical_ms(self) -> float:
        known = [b.typical_ms for b in self._backends.values() if b.typical_ms > 0]
        return sum(known) / len(known) if known else 0.0

    def note_engine_load(self, name: str, load: EngineLoad, now: float,
                         inflight_at_send: int = 0) -> None:
        """The engine's own queue gauges, just read: what they count beyond this replica's
        in-flight requests is someone else's. Ours are counted as the most in flight while the
        scrape was out (`inflight_at_send`, or now): a request of ours that ended meanwhile may
        still be in the engine's count, and is not taken for someone else's; one the engine has
        not seen yet makes this low, never high."""
        backend = self._backends[name]
        backend.gauge, backend.gauge_at = load, now
        backend.gauge_others = max(0, load.requests - max(backend.inflight, inflight_at_send))
        _seen(backend.others_seen, backend.gauge_others, now)

    def note_shared_inflight(self, counts: Mapping[str, int], now: float) -> None:
        """The other replicas' in-flight requests per instance (their published counts)."""
        for name, backend in self._backends.items():
            backend.shared_others, backend.shared_at = max(0, counts.get(name, 0)), now
            if now - backend.gauge_at > self._load_max_age_s:  # the gauges, when fresh, count
                _seen(backend.others_seen, backend.shared_others, now)

    def others_inflight(self, name: str, now: float) -> int:
        """Requests on `name` that this replica did not send, as last seen and still fresh."""
        return self._backends[name].others(now, self._load_max_age_s)

    def own_inflight(self) -> dict[str, int]:
        return {name: b.inflight for name, b in self._backends.items()}

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

    def begin(self, name: str, predicted_ms: float = 0.0, now: float = 0.0) -> int:
        """A request sent to `name`, predicted to take `predicted_ms` once served; returns
        the ticket that `end` takes."""
        ticket = next(self._tickets)
        if name in self._backends:
            backend = self._backends[name]
            backend.inflight += 1
            backend.started += 1
            backend.running[ticket] = (predicted_ms, now)
            if predicted_ms > 0:
                backend.typical_ms = (predicted_ms if backend.typical_ms <= 0 else
                                      backend.typical_ms + TYPICAL_WEIGHT
                                      * (predicted_ms - backend.typical_ms))
        return ticket

    def end(self, name: str, ticket: int = 0) -> None:
        if name in self._backends:
            self._backends[name].inflight -= 1
            self._backends[name].running.pop(ticket, None)

    def describe(self, now: float) -> list[dict[str, object]]:
        return [
            {
                "name": b.spec.name,
                "profile": b.spec.profile,
                "pools": sorted(self._pools[b.spec.name]),
                "engine": b.spec.engine,
                "url": b.spec.base_url,
                "healthy": b.healthy(now),
                "inflight": b.inflight,
                "others_inflight": self.others_inflight(b.spec.name, now),
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
        return Target(spec.name, spec.profile, spec.base_url, spec.api_key)


def _seen(seen: list[float], count: int, now: float) -> None:
    """Others' requests as now counted: the oldest are the ones that ended (an instance serves
    them in turn), new ones are seen from now."""
    del seen[:max(0, len(seen) - count)]
    seen.extend([now] * (count - len(seen)))
