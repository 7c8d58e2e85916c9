"""bench.route_replay: the route model's error on a log, each request from what had ended."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bench.route_replay import judged_requests, replay_errors
from decisionlog.records import Outcome, RouteRecord
from policies.policyfile.machine import NEUTRAL

EPOCH = datetime(2026, 12, 6, tzinfo=UTC)
MS_PER_TOKEN = 40.0


def _record(rid: str, start_s: float, *, tokens: int = 100, reason: str = "finish",
            ms_per_token: float = MS_PER_TOKEN) -> RouteRecord:
    total_ms = tokens * ms_per_token
    end = EPOCH + timedelta(seconds=start_s + total_ms / 1000.0)  # written when it ends
    return RouteRecord(
        ts=end.isoformat(timespec="milliseconds").replace("+00:00", "Z"), request_id=rid,
        endpoint="chat", model="m", stream=False, conversation="",
        features={"prompt_tokens": 0, "n_messages": 1},
        classifier={"class": "prose", "scores": {"prose": 1.0}},
        decision={"reason": reason, "queue_ms": 0.0, "service_ms": total_ms},
        outcome=Outcome(status=200, backend="plain-0", profile="plain", spec="plain",
                        total_ms=total_ms, completion_tokens=tokens,
                        backend_tps=1000.0 / ms_per_token),
        overhead_ms=0.1)


def test_each_request_is_predicted_from_the_records_that_ended_before_it() -> None:
    # one after another: the first from the prior alone, each later one from those before
    records = [_record(f"r{i}", 10.0 * i) for i in range(8)]
    errors = replay_errors(records, judged_requests(records), NEUTRAL)
    assert len(errors) == 8
    alone = 100 * NEUTRAL.t_plain_ms  # the prior's pace, no prompt
    assert errors[0] == pytest.approx(abs(alone - 4000.0) / 4000.0)
    assert errors[0] > 0.1 and errors[-1] < errors[0] / 3  # learned the pace
    # all at once: none had ended, every one from the prior
    together = [_record(f"t{i}", 0.0) for i in range(4)]
    assert replay_errors(together, judged_requests(together), NEUTRAL) == pytest.approx(
        [errors[0]] * 4)


def test_the_probe_teaches_but_is_not_judged() -> None:
    records = [_record("probe", 0.0, reason="probe"), _record("a", 10.0)]
    assert judged_requests(records) == {"a"}
    errors = replay_errors(records, judged_requests(records), NEUTRAL)
    cold = replay_errors(records[1:], {"a"}, NEUTRAL)
    assert len(errors) == 1 and errors[0] < cold[0]  # the probe's pace was learned
