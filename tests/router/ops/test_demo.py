"""The demo's table: per true class, what `auto` chose, from the run's records."""

from __future__ import annotations

from decisionlog.records import Outcome, RouteRecord
from router.ops.demo import format_table


def _record(request_id: str, reason: str, profile: str, cls: str = "technical") -> RouteRecord:
    return RouteRecord(
        ts="2026-12-01T00:00:00.000Z", request_id=request_id, endpoint="chat", model="m",
        stream=False, conversation="c", features={}, classifier={"class": cls, "lang": "en"},
        decision={"profile": profile, "backend": f"{profile}-0", "reason": reason},
        outcome=Outcome(status=200, backend=f"{profile}-0", profile=profile, completion_tokens=32,
                        decode_tps=10.0 if profile == "mtp" else 20.0), overhead_ms=0.1)


def test_the_startup_probe_is_not_counted_as_the_workloads_route() -> None:
    records = [_record("probe_mtp-0", "probe", "mtp"), _record("probe_plain-0", "probe", "plain"),
               _record("r1", "header", "mtp"), _record("r2", "header", "plain"),
               _record("r3", "finish", "plain"), _record("r4", "finish", "plain")]
    row = next(line for line in format_table(records, {}).splitlines()
               if line.startswith("technical"))
    assert row.split()[1] == "2"  # the two auto requests, not the probes
    assert row.split()[3] == "plain:2"  # the route column: no probe's mtp in it
    assert row.split()[-1] == "0.500"  # mtp/plain from the pinned requests: 10 over 20 tok/s
