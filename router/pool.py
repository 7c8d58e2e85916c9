"""The backends as the router sees them at run time: health, load, and where to send bytes.

Health comes from two places: the supervisor's probes (`set_health`) and what requests observe
(`mark_failed` after a refused connection or a 5xx). A backend marked failed by a request is
skipped for `retry_after_s`, then tried again, so that a dead instance costs one failed connect
per interval rather than one per request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count

from backends.spec import BackendSpec
from backends.upstream import Target
from policies import BackendState, queued_work


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

    def healthy(self, now: float) -> bool:
        return self.probe_healthy and now >= self.failed_until


class BackendPool:
    def __init__(
        self,
        specs: Iterable[BackendSpec],
        *,
        retry_after_s: float = 5.0,
        pools: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        self._backends = {spec.name: BackendRuntime(spec) for spec in specs}
        self._targets = {name: self._target(b.spec) for name, b in self._backends.items()}
        self._retry_after_s = retry_after_s
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
        return [
            # every decision reads every instance's queue: summed up here, not one object per
            # request in flight
            BackendState(b.spec.name, b.spec.profile, b.healthy(now), b.inflight,
                         pools=self._pools[b.spec.name], queued=queued_work(b.running.values(), now))
            for b in self._backends.values()
        ]

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
                "served": b.served,
                "failures": b.failures,
                "last_error": b.last_error,
            }
            for b in self._backends.values()
        ]

    @staticmethod
    def _target(spec: BackendSpec) -> Target:
        return Target(spec.name, spec.profile, spec.base_url, spec.api_key)
