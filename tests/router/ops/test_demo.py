"""The demo's table: per true class, what `auto` chose, from the run's records."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from backends.local.nginx import nginx_binary
from backends.local.redisserver import redis_binary
from decisionlog.records import Outcome, RouteRecord
from router.ops.demo import format_table, run_demo
from router.ops.demo_replicas import run_demo_replicas
from tests.backends.local.test_envoy import require_envoy
from tests.missing import NGINX, REDIS, skip_missing


def _record(request_id: str, reason: str, backend: str, cls: str = "technical",
            tps: float = 20.0, draft: tuple[int, int] | None = None) -> RouteRecord:
    profile = "plain" if backend.startswith("plain") else "mtp"
    return RouteRecord(
        ts="2026-12-01T00:00:00.000Z", request_id=request_id, endpoint="chat", model="m",
        stream=False, conversation="c", features={}, classifier={"class": cls, "lang": "en"},
        decision={"profile": profile, "backend": backend, "reason": reason},
        outcome=Outcome(status=200, backend=backend, profile=profile, completion_tokens=32,
                        decode_tps=tps, draft_n=draft[0] if draft else None,
                        draft_accepted=draft[1] if draft else None), overhead_ms=0.1)


def test_the_startup_probe_is_not_counted_as_the_workloads_route() -> None:
    records = [_record("probe_mtp-0", "probe", "mtp-0"), _record("probe_plain-0", "probe", "plain-0"),
               _record("r1", "header", "mtp-0", tps=10.0, draft=(20, 15)),
               _record("r2", "header", "plain-0"), _record("r3", "header", "ngram-0", tps=40.0),
               _record("r4", "finish", "plain-0"), _record("r5", "finish", "plain-0")]
    table = format_table(records, {}, ["plain-0", "ngram-0", "mtp-0"])
    header = table.splitlines()[0].split()
    assert header[-6:] == ["plain-0", "ms/tok", "ngram-0", "ms/tok", "mtp-0", "ms/tok"]
    row = next(line for line in table.splitlines() if line.startswith("technical")).split()
    assert row[1] == "2"  # the two auto requests, not the probes
    assert row[3] == "plain-0:2"  # where auto sent them: no probe in it
    # each instance's ms per token from the requests pinned to it, acceptance where it drafted
    assert row[4:] == ["50.0", "25.0", "100.0", "(0.75)"]


def test_a_class_not_measured_on_an_instance_shows_a_dash() -> None:
    records = [_record("r1", "header", "plain-0", cls="edit"), _record("r2", "finish", "ngram-0")]
    row = next(line for line in format_table(records, {"r1": "edit", "r2": "edit"},
                                             ["plain-0", "ngram-0"]).splitlines()
               if line.startswith("edit")).split()
    assert row[3:] == ["ngram-0:1", "50.0", "-"]


def test_the_simulated_demo_measures_three_instances_then_routes_on_auto(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo(backends="fake", requests=3, max_tokens=16, min_samples=1,
                    out=str(tmp_path)) == 0
    printed = capsys.readouterr().out
    assert all(f"{name} ms/tok" in printed for name in ("mtp-0", "plain-0", "ngram-0"))
    records = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    workload = [r for r in records if not r["request_id"].startswith("probe_")]
    pinned = [r for r in workload if r["decision"]["reason"] == "header"]
    # each of the 3 requests pinned to each instance alone (a pool of one), then 3 on auto
    assert sorted(r["outcome"]["backend"] for r in pinned) == sorted(
        ["mtp-0", "plain-0", "ngram-0"] * 3)
    assert len(workload) == 12
    assert all(r["outcome"]["status"] == 200 for r in workload)


def test_the_simulated_demo_with_slots_batches_and_records_each_requests_batch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo(backends="fake", requests=2, max_tokens=16, min_samples=1,
                    out=str(tmp_path), slots=4) == 0
    assert "4 slots each on a GPU-like batch curve" in capsys.readouterr().out
    records = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    workload = [r for r in records if not r["request_id"].startswith("probe_")]
    assert len(workload) == 8 and all(r["outcome"]["status"] == 200 for r in workload)
    # one client: each request alone on its instance, and its record says so
    assert all(r["outcome"]["batch_start"] == 1 for r in workload)
    assert all(1.0 <= r["outcome"]["batch_mean"] <= 4.0 for r in workload)
    assert all(r["decision"]["pace_ms"] > 0 for r in workload)


def test_the_demo_behind_a_real_envoy_routes_and_records_through_the_picker(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_envoy()
    assert run_demo(backends="fake", requests=2, max_tokens=16, min_samples=1,
                    out=str(tmp_path), front="envoy") == 0
    printed = capsys.readouterr().out
    assert "specroute its endpoint picker" in printed
    records = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    workload = [r for r in records if not r["request_id"].startswith("probe_")]
    # 2 requests pinned to each of the 3 instances, then 2 on auto: each through Envoy, read by
    # the picker (the pin is a request header it saw; the tokens come from the answer it watched)
    assert [r["decision"]["reason"] for r in workload].count("header") == 6
    assert len(workload) == 8
    assert all(r["outcome"]["status"] == 200 and r["outcome"]["completion_tokens"] > 0
               for r in workload)
    assert {r["outcome"]["backend"] for r in workload if r["decision"]["reason"] == "header"} \
        == {"mtp-0", "plain-0", "ngram-0"}


def test_the_demo_with_two_replicas_behind_nginx_shares_what_each_learned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for binary, missing in ((redis_binary(), REDIS), (nginx_binary(), NGINX)):
        if binary is None:
            skip_missing(missing)
    assert run_demo_replicas(backends="fake", requests=2, max_tokens=16, min_samples=1,
                             out=str(tmp_path), replicas=2) == 0
    printed = capsys.readouterr().out
    workload = {}
    for replica in ("a", "b"):
        lines = (tmp_path / f"decisions-{replica}.jsonl").read_text().splitlines()
        workload[replica] = [r for r in map(json.loads, lines)
                             if not r["request_id"].startswith("probe_")]
        assert all(r["outcome"]["status"] == 200 for r in workload[replica])
    # 2 requests pinned to each of 3 instances, 2 on auto, 3 conversation turns; nginx hands
    # them out in turn, and the owner of an instance in its share serves what goes there
    assert len(workload["a"]) + len(workload["b"]) == 11
    assert workload["a"] and workload["b"]
    assert all(f"{name} ms/tok" in printed for name in ("mtp-0", "plain-0", "ngram-0"))
    shares = re.findall(r"replica (\w): (\d+) = its own (\d+) \+ (\d+) learned", printed)
    assert sorted(name for name, _, _, _ in shares) == ["a", "b"]
    totals = {int(total) for _, total, _, _ in shares}
    assert len(totals) == 1  # both decide with every record
    assert all(int(other) > 0 for _, _, _, other in shares)
    assert sum(int(own) for _, _, own, _ in shares) == totals.pop()
    turns = re.findall(r"turn \d: replica (\w).* -> ([\w-]+),", printed)
    assert len(turns) == 3 and len({instance for _, instance in turns}) == 1
    assert "the conversation stayed on its instance" in printed
    for pid in re.findall(r"\(pid (\d+)", printed):  # redis-server and nginx, stopped by PID
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid), 0)
