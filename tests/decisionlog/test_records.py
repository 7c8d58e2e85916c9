"""The decision-log record: serialisation, round trip, and readers that skip what they can't read."""

from __future__ import annotations

import json

from decisionlog.records import Outcome, ReadStats, RouteRecord, parse_line, parse_lines, to_json

RECORD = RouteRecord(
    ts="2026-11-29T12:00:00.000Z", request_id="req_1", endpoint="chat", model="m", stream=True,
    conversation="abcd", features={"n_tools": 1, "greedy": True, "cjk_share": 0.5},
    classifier={"class": "agent", "lang": "en", "scores": {"agent": 0.9}, "p_spec": 0.8, "artifact": "rules-v1"},
    decision={"profile": "mtp", "backend": "mtp-0", "reason": "class", "rule": "routes.agent",
              "explored": False, "threshold": None},
    outcome=Outcome(status=200, backend="mtp-0", profile="mtp", draft_n=10, draft_accepted=9,
                    failover_from=("x",)),
    overhead_ms=0.4,
)


def test_round_trip_and_field_order() -> None:
    line = to_json(RECORD)
    assert line.startswith('{"schema_version":1,"ts":')
    assert "content" not in json.loads(line)
    assert parse_line(line) == RECORD
    assert RECORD.acceptance == 0.9


def test_content_only_when_present() -> None:
    from dataclasses import replace

    line = to_json(replace(RECORD, content={"last_user": "hi"}))
    assert json.loads(line)["content"] == {"last_user": "hi"}


def test_the_decisions_inputs_stay_in_memory() -> None:
    from array import array
    from dataclasses import replace

    with_inputs = replace(RECORD, inputs=array("d", [1.0, 0.5]))
    line = to_json(with_inputs)
    assert line == to_json(RECORD) and "inputs" not in json.loads(line)
    read = parse_line(line)
    assert read is not None and read.inputs is None


def test_readers_skip_and_count_what_they_cannot_read() -> None:
    good = to_json(RECORD)
    future = json.dumps({**json.loads(good), "schema_version": 99})
    lines = [good, "not json", future, '{"schema_version": 1}', "", '{"no": "version"}', good[:40], good]
    stats = ReadStats()
    records = list(parse_lines(lines, stats))
    assert len(records) == 2
    assert stats.read == 2
    assert stats.skipped_versions == {99: 1}
    assert stats.skipped_malformed == 4
    assert "schema_version 99" in stats.summary()


def _standard(record: RouteRecord) -> object:
    """What the standard encoder made of a record before orjson wrote the fast path."""
    from decisionlog.records import _as_data, _standard_line

    return json.loads(_standard_line(_as_data(record)))


def test_the_fast_line_holds_what_the_standard_encoder_writes() -> None:
    from dataclasses import replace

    class Wrapped(float):  # numpy's float64 is a float subclass
        pass

    cases = [
        RECORD,
        replace(RECORD, features={"temperature": 1e-05, "big": 10**30, "x": Wrapped(0.25)}),
        replace(RECORD, model="m\ud800"),  # a lone surrogate: json escapes it, orjson refuses
        replace(RECORD, model="é" * 5000),  # capped, not ASCII
        replace(RECORD, decision={"finish_ms": {"a": 1.5}, "when": object()}),  # str() of the rest
    ]
    for record in cases:
        line = to_json(record)
        assert json.loads(line) == _standard(record)
    assert json.loads(to_json(cases[1]))["features"]["x"] == 0.25  # a number, not "0.25"


def test_a_non_finite_number_is_written_as_the_standard_encoder_writes_it() -> None:
    from dataclasses import replace

    for value in (float("nan"), float("inf"), -float("inf")):
        record = replace(RECORD, features={"temperature": value, "nested": [{"x": value}]})
        features = json.loads(to_json(record))["features"]
        # orjson would write null, and readers would read None where the proxy saw a number
        assert repr(features["temperature"]) == repr(value)
        assert repr(features["nested"][0]["x"]) == repr(value)
