"""Where a finished request's record goes (the decision log, the online route model, the
metrics, the dashboard's ring), when, and what happens when one of them cannot take it: serving
goes on, the failure is counted (`specroute_record_sink_failures_total`), reported on `/readyz`,
and logged once per outage.

When: `RecordQueue` collects the requests that finished within a short interval (`Deps.
record_interval_s`, 20 ms) and then builds their records and hands them to the sinks in order,
as one batch to a sink that takes batches (`write_records`: one decision-log write, one rebuild
of the route model) and one by one to the others. The answers have left by then; nothing is
dropped or reordered; the route model learns each outcome at most that interval later.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import web

from decisionlog.records import RouteRecord
from router.state import RecordSink

log = structlog.get_logger("specroute")
ERROR_CAP = 300  # characters of an exception message kept for the report


@dataclass
class SinkHealth:
    """Failures of each sink since start; `failing` names those whose last write failed."""

    failures: dict[str, int] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)
    on_failure: Callable[[str], None] | None = None  # the metrics counter

    def failed(self, name: str, exc: BaseException, records: int = 1) -> None:
        """`records` were lost to `exc`."""
        self.failures[name] = self.failures.get(name, 0) + records
        self.last_error[name] = f"{type(exc).__name__}: {exc}"[:ERROR_CAP]
        if name not in self.failing:  # one line per outage, not one per request
            log.warning("record_sink_failing", sink=name, error=self.last_error[name])
            self.failing.add(name)
        if self.on_failure is not None:
            for _ in range(records):
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


def write_batch(sinks: Iterable[RecordSink], records: Sequence[RouteRecord], health: SinkHealth) -> None:
    """Give `records` (in order) to every sink: whole to one that takes batches, else one by one.
    A sink that raises costs its own copies, never the request nor the other sinks'."""
    for sink in sinks:
        take_batch = getattr(sink, "write_records", None)
        if take_batch is not None:
            _deliver(sink, take_batch, records, len(records), health)
        else:
            for record in records:
                _deliver(sink, sink.write_record, record, 1, health)


def _deliver(sink: RecordSink, write: Callable[[Any], None], item: object, count: int,
             health: SinkHealth) -> None:
    """`write(item)` (`count` records); a failure is counted (as the lines the sink says it lost,
    else `count`), a success after failures ends the outage."""
    try:
        write(item)
    except Exception as exc:  # noqa: BLE001  # a full disk must not fail the request
        health.failed(sink_name(sink), exc, records=getattr(exc, "lost", count))
    else:
        if health.failing:
            health.succeeded(sink_name(sink))


class RecordQueue:
    """Finished requests whose records are built and handed to the sinks in batches.

    `put` takes a function that builds the record (what the handler knew at the end is bound
    in it), so that building it, serialising it and the sinks' work all run after the answer
    left, once per batch: `interval_s` after the first record of a batch, or at the next turn
    of the loop once `max_batch` are waiting (`interval_s` 0: each record at once, as its
    request finishes). A batch runs with the code and data of the last record still in the
    CPU's caches: on a busy proxy (whose caches the network traffic keeps cold) that is a third
    of the cost of one record at a time. `flush` runs the queue now (at shutdown, before the
    decision log closes).
    """

    def __init__(
        self, sinks: list[RecordSink], health: SinkHealth, *, interval_s: float = 0.0,
        max_batch: int = 256,
    ) -> None:
        self._sinks = sinks  # the app's list: sinks added at start-up are seen
        self._health = health
        self._interval_s = interval_s
        self._max_batch = max_batch
        self._pending: list[Callable[[], RouteRecord]] = []
        self._due: asyncio.Handle | None = None

    def __len__(self) -> int:
        return len(self._pending)

    def put(self, build: Callable[[], RouteRecord]) -> None:
        self._pending.append(build)
        if self._interval_s <= 0:
            self.flush()
            return
        full = len(self._pending) >= self._max_batch
        if self._due is not None and not full:
            return
        if self._due is not None:
            self._due.cancel()
        loop = asyncio.get_running_loop()
        self._due = loop.call_soon(self.flush) if full else loop.call_later(self._interval_s, self.flush)

    def flush(self) -> None:
        if self._due is not None:
            self._due.cancel()
            self._due = None
        pending, self._pending = self._pending, []
        records = []
        for build in pending:
            try:
                records.append(build())
            except Exception as exc:  # noqa: BLE001  # a bug building one record loses only it
                self._health.failed("record", exc)
        if records:
            write_batch(self._sinks, records, self._health)


SINKS = web.AppKey("sinks", list[RecordSink])  # in order: the decision log first
SINK_HEALTH = web.AppKey("sink_health", SinkHealth)
RECORDS = web.AppKey("records", RecordQueue)  # finished requests whose records are due
