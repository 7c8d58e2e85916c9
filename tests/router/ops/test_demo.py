"""The demo's table: per true class, what `auto` chose, from the run's records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decisionlog.records import Outcome, RouteRecord
from router.ops.demo import format_table, run_demo
from tests.backends.local.test_envoy import require_envoy


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


def test_the_demo_behind_a_real_envoy_routes_and_records_through_the_picker(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_envoy()
    assert run_demo(backends="fake", requests=2, max_tokens=16, min_samples=1,
                    out=str(tmp_path), front="envoy") == 0
    printed = capsys.readouterr().out
    assert "specroute its endpoint picker" in printed
    records = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    workload = [r for r in records if not r["request_id"].startswith("probe_")]
    # 2 requests pinned to each instance, then 2 on auto: each through Envoy, read by the
    # picker (the pin is a request header it saw; the tokens come from the answer it watched)
    assert [r["decision"]["reason"] for r in workload].count("header") == 4
    assert len(workload) == 6
    assert all(r["outcome"]["status"] == 200 and r["outcome"]["completion_tokens"] > 0
               for r in workload)
    assert {r["outcome"]["profile"] for r in workload if r["decision"]["reason"] == "header"} \
        == {"mtp", "plain"}
