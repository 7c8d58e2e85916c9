"""Prometheus metrics of one router app (`GET /metrics`), in a registry the app owns (no
process-wide globals, so two apps in one process, as in tests, never share counts). An add-on:
the request path never calls it.

Durations are exported in seconds (Prometheus base units); the record's `overhead_ms` and
`ttft_ms` are converted. Acceptance is exported two ways: a per-request histogram, and counters of
drafted and accepted tokens whose rate ratio is the pooled acceptance Grafana plots.
Labels are positional in the calls below because one of them is named `class`.
Label values are bounded sets (classes, languages, the configured instances and their speculation
configs, policy reason codes, HTTP statuses, the pools and arms the policy names); free text (error
messages) never becomes a label. `spec` is the serving instance's speculation config
(`backends.spec` `spec_key`: `plain`, `mtp`, `ngram-simple`, `draft`, ...), never the `mtp|plain`
shorthand, which calls every speculating instance `mtp`.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from decisionlog.records import RouteRecord
from decisionlog.summary import (
    record_backend,
    record_class,
    record_lang,
    record_profile,
    record_reason,
    record_spec,
    record_tps,
)
from router.edge.admin import guard_admin
from router.instances.engine_load import GAUGE_SCRAPES
from router.instances.pool import POOL
from router.learning.online import ONLINE, model_status
from router.replicas.link import REPLICAS
from router.state import DEPS, POLICY, SUPERVISOR, Addon

_OVERHEAD_BUCKETS: Final = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25)
_TTFT_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
_TPS_BUCKETS: Final = (1, 2, 5, 8, 10, 12, 14, 16, 18, 20, 25, 30, 40, 60, 100, 200, 500)
_ACCEPTANCE_BUCKETS: Final = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)


class Metrics:
    """Every series the router exports; `observe` is called once per logged request."""

    def __init__(self, namespace: str = "specroute") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # (metric, label values) -> its child: prometheus_client validates and locks on every
        # `labels()`; a record takes several. Bounded by the series that exist.
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}
        ns, reg = namespace, self.registry
        self.requests = Counter(
            "requests", "Requests by class, language, served speculation config, backend, reason, "
            "status", ["class", "lang", "spec", "backend", "reason", "status"], namespace=ns, registry=reg)
        self.explored = Counter(
            "explored_requests", "Requests routed against the policy to explore, by class",
            ["class"], namespace=ns, registry=reg)
        self.overhead = Histogram(
            "proxy_overhead_seconds", "Time the proxy itself added to a request",
            namespace=ns, registry=reg, buckets=_OVERHEAD_BUCKETS)
        self.ttft = Histogram(
            "ttft_seconds", "Time to first token, by served speculation config and class",
            ["spec", "class"], namespace=ns, registry=reg, buckets=_TTFT_BUCKETS)
        self.decode_tps = Histogram(
            "decode_tokens_per_second", "Decode tokens/s per request, by served speculation config and "
            "class", ["spec", "class"], namespace=ns, registry=reg, buckets=_TPS_BUCKETS)
        self.completion_tokens = Counter(
            "completion_tokens", "Completion tokens, by served speculation config and class",
            ["spec", "class"], namespace=ns, registry=reg)
        self.acceptance = Histogram(
            "acceptance_ratio", "Per-request draft acceptance where drafts were verified, by class",
            ["class"], namespace=ns, registry=reg, buckets=_ACCEPTANCE_BUCKETS)
        self.draft_tokens = Counter(
            "draft_tokens", "Drafted tokens verified, by class",
            ["class"], namespace=ns, registry=reg)
        self.draft_accepted = Counter(
            "draft_accepted_tokens", "Drafted tokens accepted, by class",
            ["class"], namespace=ns, registry=reg)
        self.backend_healthy = Gauge(
            "backend_healthy", "1 when the backend passes its health probe, else 0",
            ["backend", "spec"], namespace=ns, registry=reg)
        self.backend_restarts = Counter(
            "backend_restarts", "Restarts of supervised backends",
            ["backend"], namespace=ns, registry=reg)
        self.failovers = Counter(
            "failovers", "Requests moved to another backend before the first byte",
            ["from_backend", "to_backend"], namespace=ns, registry=reg)
        self.policy_reloads = Counter(
            "policy_reloads", "Policy and learned-state reloads, by result (ok, failed)",
            ["result"], namespace=ns, registry=reg)
        self.model_speedup = Gauge(
            "model_speedup", "Predicted mtp speedup for a request wholly of a class (the model)",
            ["cls"], namespace=ns, registry=reg)
        self.arm_requests = Counter(
            "arm_requests", "Requests by class, pool and arm (pool plus the route's rewrite)",
            ["class", "pool", "arm"], namespace=ns, registry=reg)
        self.sink_failures = Counter(
            "record_sink_failures", "Records a sink could not take (decision_log: lines lost)",
            ["sink"], namespace=ns, registry=reg)
        self.store_up = Gauge(
            "store_up", "1 while the replicas' shared store answers, else 0 (only with a store)",
            namespace=ns, registry=reg)
        self.store_failures = Counter(
            "store_failures", "Shared-store calls that failed (down, slow, not Redis)",
            namespace=ns, registry=reg)
        self.store_replicas = Gauge(
            "store_replicas", "Other replicas whose learned sums this one adds",
            namespace=ns, registry=reg)
        self.others_inflight = Gauge(
            "backend_others_inflight", "Requests on an instance that this replica did not send "
            "(its engine's gauges, or other replicas' published counts)",
            ["backend"], namespace=ns, registry=reg)
        self.collision_risk = Gauge(
            "replica_collision_risk", "The learned chance that a request sent to an instance that "
            "looked free meets another replica's, sent there as blind (router/instances/contention)",
            namespace=ns, registry=reg)
        self.channel_latency = Gauge(
            "replica_channel_latency_seconds", "How long this replica's published load takes to "
            "come back on the store's channel (recent highs)", namespace=ns, registry=reg)
        self.load_direct = Gauge(
            "replica_load_direct", "Other replicas whose load this one hears on a stream from "
            "them (router/replicas/peer_load), not through the store", namespace=ns, registry=reg)
        self.passed_on = Counter(
            "replica_passed_on", "Requests this replica passed to the replica whose share held "
            "their instance: answered there, not taken (sent from here), or declined there (its "
            "share busy: placed here, outside it)",
            ["result"], namespace=ns, registry=reg)
        self.gauge_scrapes_dropped = Counter(
            "gauge_scrapes_dropped", "Engine queue-gauge scrapes ignored (failed, slow, or lying)",
            ["backend"], namespace=ns, registry=reg)
        for result in ("ok", "failed"):
            self.policy_reloads.labels(result=result)  # both series exist from the start

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe(self, record: RouteRecord) -> None:
        cls, spec = record_class(record), record_spec(record)
        outcome = record.outcome
        self._child(
            self.requests, cls, record_lang(record), spec, record_backend(record),
            record_reason(record), str(outcome.status or "none"),
        ).inc()
        if record.decision.get("explored"):
            self._child(self.explored, cls).inc()
        self.overhead.observe(max(record.overhead_ms, 0.0) / 1000.0)
        if outcome.ttft_ms is not None:
            self._child(self.ttft, spec, cls).observe(outcome.ttft_ms / 1000.0)
        tps = record_tps(record)
        if tps is not None:
            self._child(self.decode_tps, spec, cls).observe(tps)
        if outcome.completion_tokens:
            self._child(self.completion_tokens, spec, cls).inc(outcome.completion_tokens)
        acceptance = record.acceptance
        if acceptance is not None:
            self._child(self.acceptance, cls).observe(acceptance)
            self._child(self.draft_tokens, cls).inc(outcome.draft_n or 0)
            self._child(self.draft_accepted, cls).inc(outcome.draft_accepted or 0)
        for source in outcome.failover_from:
            self.inc_failover(source, record_backend(record))
        pool = str(record.decision.get("pool") or record_profile(record))
        self._child(self.arm_requests, cls, pool, str(record.decision.get("arm") or pool)).inc()

    def set_backend_health(self, name: str, spec: str, healthy: bool) -> None:
        self.backend_healthy.labels(backend=name, spec=spec).set(1 if healthy else 0)

    def inc_backend_restart(self, name: str) -> None:
        self.backend_restarts.labels(backend=name).inc()

    def inc_failover(self, from_backend: str, to_backend: str) -> None:
        self._child(self.failovers, from_backend, to_backend).inc()

    def inc_sink_failure(self, sink: str) -> None:
        self.sink_failures.labels(sink=sink).inc()

    def policy_reload(self, ok: bool) -> None:
        self.policy_reloads.labels(result="ok" if ok else "failed").inc()

    def set_model_speedup(self, cls: str, value: float) -> None:
        self.model_speedup.labels(cls=cls).set(value)

    def render(self) -> tuple[bytes, str]:
        """The exposition body and its content type, for the `/metrics` handler."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsAddon(Addon):
    """`GET /metrics`: every record counted as it is logged; the app's state (backend health and
    restarts, policy reloads, the model's predicted speedup per class) read when Prometheus
    scrapes."""

    sink_name = "metrics"

    def __init__(self, *, admin_token: str = "") -> None:
        self.metrics = Metrics()
        self.admin_token = admin_token  # besides loopback clients, who may scrape
        self._restarts_seen: dict[str, int] = {}
        self._reloads_seen = {"ok": 0, "failed": 0}
        self._store_failures_seen = 0
        self._passed_on_seen: dict[str, int] = {}
        self._dropped_seen: dict[str, int] = {}

    def add_routes(self, app: web.Application) -> None:
        async def serve(request: web.Request) -> web.Response:
            guard_admin(request, self.admin_token)
            self.refresh(request.app)
            body, content_type = self.metrics.render()
            response = web.Response(body=body)
            response.headers["Content-Type"] = content_type
            return response

        app.router.add_get("/metrics", serve)

    def write_record(self, record: RouteRecord) -> None:
        self.metrics.observe(record)

    def refresh(self, app: web.Application) -> None:
        """Bring the series that follow the app's state up to date."""
        metrics, now = self.metrics, app[DEPS].clock()
        for backend in app[POOL].describe(now):
            metrics.set_backend_health(
                str(backend["name"]), str(backend["speculation"]), bool(backend["healthy"])
            )
        supervisor = app.get(SUPERVISOR)
        for name, status in (supervisor.statuses() if supervisor is not None else {}).items():
            for _ in range(status.restarts - self._restarts_seen.get(name, 0)):
                metrics.inc_backend_restart(name)
            self._restarts_seen[name] = status.restarts
        store = app[POLICY]
        reloads = {"ok": store.counters.ok, "failed": sum(store.counters.failed.values())}
        for result, count in reloads.items():
            for _ in range(count - self._reloads_seen[result]):
                metrics.policy_reload(ok=result == "ok")
        self._reloads_seen = reloads
        for cls, row in model_status(app[ONLINE].model)["classes"].items():
            metrics.set_model_speedup(cls, row["value"])
        self._refresh_load(app, now)

    def _refresh_load(self, app: web.Application, now: float) -> None:
        """The shared store's health and the load others put on each instance."""
        metrics = self.metrics
        pool = app[POOL]
        for name in pool.names:
            metrics.others_inflight.labels(backend=name).set(pool.others_inflight(name, now))
        for name, scrapes in app.get(GAUGE_SCRAPES, {}).items():
            metrics.gauge_scrapes_dropped.labels(backend=name).inc(
                scrapes.dropped - self._dropped_seen.get(name, 0))
            self._dropped_seen[name] = scrapes.dropped
        link = app.get(REPLICAS)
        if link is not None:
            health = link.health
            metrics.store_up.set(1.0 if health.state == "ok" else 0.0)
            metrics.store_failures.inc(health.failures - self._store_failures_seen)
            self._store_failures_seen = health.failures
            metrics.store_replicas.set(len(health.replicas))
            metrics.collision_risk.set(pool.contention.risk())
            metrics.channel_latency.set(link.channel_latency_s)
            metrics.load_direct.set(len(link.direct))
            for result, total in (("answered", link.passed_on.answered),
                                  ("not_taken", link.passed_on.not_taken),
                                  ("declined", link.passed_on.declined)):
                metrics.passed_on.labels(result=result).inc(
                    total - self._passed_on_seen.get(result, 0))
                self._passed_on_seen[result] = total
