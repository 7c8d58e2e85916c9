"""Records reach the sinks after the answer, in order, once per turn of the event loop; a sink
that fails loses its own copies only and is counted per record lost."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from decisionlog.records import RouteRecord
from router.learning.sinks import RecordQueue, SinkHealth
from tests.decisionlog.examples import make_record


class OneByOne:
    sink_name = "one_by_one"

    def __init__(self) -> None:
        self.ids: list[str] = []

    def write_record(self, record: RouteRecord) -> None:
        self.ids.append(record.request_id)


class Batches:
    sink_name = "batches"

    def __init__(self, fail: bool = False) -> None:
        self.batches: list[list[str]] = []
        self.fail = fail

    def write_record(self, record: RouteRecord) -> None:
        self.write_records([record])

    def write_records(self, records: Sequence[RouteRecord]) -> None:
        if self.fail:
            raise OSError("disk full")
        self.batches.append([r.request_id for r in records])


def _build(request_id: str) -> RouteRecord:
    return make_record(request_id=request_id)


async def test_records_of_one_interval_go_out_together_and_in_order() -> None:
    single, batches = OneByOne(), Batches()
    queue = RecordQueue([batches, single], SinkHealth(), interval_s=3600.0)
    for i in range(3):
        queue.put(lambda i=i: _build(f"r{i}"))
    assert batches.batches == [] and len(queue) == 3  # nothing yet: the interval runs
    queue.flush()
    assert batches.batches == [["r0", "r1", "r2"]] and single.ids == ["r0", "r1", "r2"]
    queue.put(lambda: _build("r3"))
    queue.flush()
    assert batches.batches == [["r0", "r1", "r2"], ["r3"]] and len(queue) == 0


async def test_without_an_interval_each_record_is_written_as_its_request_finishes() -> None:
    batches = Batches()
    queue = RecordQueue([batches], SinkHealth(), interval_s=0.0)
    queue.put(lambda: _build("r0"))
    assert batches.batches == [["r0"]]  # before any other task runs
    queue.put(lambda: _build("r1"))
    assert batches.batches == [["r0"], ["r1"]] and len(queue) == 0


async def test_a_failing_sink_counts_each_record_it_lost_and_the_others_get_theirs() -> None:
    failures: list[str] = []
    health = SinkHealth(on_failure=failures.append)
    single, broken = OneByOne(), Batches(fail=True)
    queue = RecordQueue([broken, single], health, interval_s=3600.0)
    for i in range(4):
        queue.put(lambda i=i: _build(f"r{i}"))
    queue.flush()
    assert single.ids == ["r0", "r1", "r2", "r3"]
    assert health.failures == {"batches": 4} and failures == ["batches"] * 4
    assert not health.describe()["batches"]["ok"]  # type: ignore[index]
    broken.fail = False
    queue.put(lambda: _build("r4"))
    queue.flush()
    assert broken.batches == [["r4"]] and health.describe()["batches"]["ok"]  # type: ignore[index]


async def test_a_record_that_cannot_be_built_costs_only_itself() -> None:
    health = SinkHealth()
    single = OneByOne()
    queue = RecordQueue([single], health, interval_s=3600.0)

    def broken() -> RouteRecord:
        raise ValueError("bug")

    queue.put(lambda: _build("r0"))
    queue.put(broken)
    queue.put(lambda: replace(_build("r2")))
    queue.flush()
    assert single.ids == ["r0", "r2"] and health.failures == {"record": 1}


async def test_records_wait_for_the_interval_or_a_full_batch() -> None:
    batches = Batches()
    queue = RecordQueue([batches], SinkHealth(), interval_s=3600.0, max_batch=3)
    queue.put(lambda: _build("r0"))
    queue.put(lambda: _build("r1"))
    await asyncio.sleep(0)
    assert batches.batches == [] and len(queue) == 2  # an hour to go, and not full
    queue.put(lambda: _build("r2"))  # full: at the next turn
    await asyncio.sleep(0)
    assert batches.batches == [["r0", "r1", "r2"]]
    queue.put(lambda: _build("r3"))
    queue.flush()  # shutdown: whatever waits is written now
    assert batches.batches == [["r0", "r1", "r2"], ["r3"]]


async def test_records_go_out_once_the_interval_has_passed() -> None:
    batches = Batches()
    queue = RecordQueue([batches], SinkHealth(), interval_s=0.01)
    for i in range(5):
        queue.put(lambda i=i: _build(f"r{i}"))
    for _ in range(500):  # bounded: 5 s
        if batches.batches:
            break
        await asyncio.sleep(0.01)
    assert batches.batches == [[f"r{i}" for i in range(5)]]
