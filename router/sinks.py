"""Where a finished request's record goes (the decision log, the metrics, the dashboard's ring),
and what happens when one of them cannot take it: serving goes on, the failure is counted
(`specroute_record_sink_failures_total`), reported on `/readyz`, and logged once per outage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from decisionlog.records import RouteRecord

log = structlog.get_logger("specroute")
ERROR_CAP = 300  # characters of an exception message kept for the report


class RecordSink(Protocol):
    def write_record(self, record: RouteRecord) -> None: ...


@dataclass
class SinkHealth:
    """Failures of each sink since start; `failing` names those whose last write failed."""

    failures: dict[str, int] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)
    on_failure: Callable[[str], None] | None = None  # the metrics counter

    def failed(self, name: str, exc: BaseException) -> None:
        self.failures[name] = self.failures.get(name, 0) + 1
        self.last_error[name] = f"{type(exc).__name__}: {exc}"[:ERROR_CAP]
        if name not in self.failing:  # one line per outage, not one per request
            log.warning("record_sink_failing", sink=name, error=self.last_error[name])
            self.failing.add(name)
        if self.on_failure is not None:
            self.on_failure(name)

    def succeeded(self, name: str) -> None:
        if name in self.failing:
            self.failing.discard(name)
            log.info("record_sink_recovered", sink=name, failures=self.failures[name])

    def describe(self) -> dict[str, object]:
        return {
            name: {"ok": name not in self.failing, "failures": count,
                   "last_error": self.last_error.get(name, "")}
            for name, count in self.failures.items()
        }


def sink_name(sink: RecordSink) -> str:
    return str(getattr(sink, "sink_name", type(sink).__name__))


def write_all(sinks: Iterable[RecordSink], record: RouteRecord, health: SinkHealth) -> None:
    """Give `record` to every sink; one that raises costs its own copy, never the request."""
    for sink in sinks:
        try:
            sink.write_record(record)
        except Exception as exc:  # noqa: BLE001  # a full disk must not fail the request
            health.failed(sink_name(sink), exc)
        else:
            if health.failing:
                health.succeeded(sink_name(sink))
