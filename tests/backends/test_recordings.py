"""The stats parsers on real llama-server responses (llama.cpp 0c1e570, SmolLM2-135M as its own
depth-1 draft), recorded by `python -m tests.backends.record_llamacpp`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backends.capability import common_model
from backends.engines import ADAPTERS
from backends.sse import SSESplitter, event_json
from backends.stats import (
    EMPTY,
    UpstreamReport,
    counter_delta,
    merge,
    parse_prometheus,
    read_report,
)

RECORDINGS = Path(__file__).resolve().parent / "recordings"


def load(name: str) -> Any:
    return json.loads((RECORDINGS / name).read_text())


def stream_events(name: str) -> list[Any]:
    splitter = SSESplitter()
    raw = splitter.feed((RECORDINGS / name).read_bytes()) + [splitter.flush()]
    return [event for event in map(event_json, raw) if event is not None]


def stream_report(name: str) -> UpstreamReport:
    report = EMPTY
    for event in stream_events(name):
        report = merge(report, read_report(event))
    return report


@pytest.mark.parametrize(
    ("recording", "expected"),
    [
        ("chat_mtp.json", UpstreamReport(prompt_tokens=39, cached_tokens=0, completion_tokens=24,
                                         backend_tps=37.50099866789931, draft_n=11,
                                         draft_accepted=11, spec_source="timings")),
        ("completions_mtp.json", UpstreamReport(prompt_tokens=6, cached_tokens=0,
                                                completion_tokens=24,
                                                backend_tps=32.2639471432379, draft_n=11,
                                                draft_accepted=11, spec_source="timings")),
        # the plain instance's timings have no draft keys at all
        ("chat_plain.json", UpstreamReport(prompt_tokens=39, cached_tokens=0,
                                           completion_tokens=24, backend_tps=86.03341088808922)),
    ],
)
def test_whole_responses(recording: str, expected: UpstreamReport) -> None:
    assert read_report(load(recording)) == expected


def test_stream_with_usage_reports_on_the_usage_chunk() -> None:
    events = stream_events("chat_stream_mtp.sse")
    last = events[-1]
    # llama.cpp puts usage and timings on the usage-only chunk when include_usage is set
    assert last["choices"] == [] and "usage" in last and "timings" in last
    assert all("timings" not in event for event in events[:-1])
    assert stream_report("chat_stream_mtp.sse") == UpstreamReport(
        prompt_tokens=39, cached_tokens=0, completion_tokens=24, backend_tps=32.04306588054345,
        draft_n=11, draft_accepted=11, spec_source="timings")


def test_stream_without_usage_reports_timings_on_the_finish_chunk() -> None:
    events = stream_events("chat_stream_plain.sse")
    assert events[-1]["choices"][0]["finish_reason"] == "length" and "usage" not in events[-1]
    # the same counts usage gives when asked (`chat_stream_mtp.sse`, the same prompt): what the
    # proxy reads without asking llama.cpp for its usage chunk
    assert stream_report("chat_stream_plain.sse") == UpstreamReport(
        prompt_tokens=39, cached_tokens=0, completion_tokens=24, backend_tps=78.24992345116185)


def test_streamed_and_whole_text_are_the_same() -> None:
    text = "".join(event["choices"][0]["delta"].get("content") or ""
                   for event in stream_events("chat_stream_mtp.sse") if event["choices"])
    assert text == load("chat_mtp.json")["choices"][0]["message"]["content"]
    assert text.startswith("```python\ndef add_numbers(")


def test_profiles_answered_the_same_text() -> None:
    assert (load("chat_mtp.json")["choices"][0]["message"]["content"]
            == load("chat_plain.json")["choices"][0]["message"]["content"])


def test_prometheus_counters_add_up_to_the_timings() -> None:
    counters = ADAPTERS["llamacpp"].counters
    assert counters is not None
    before = parse_prometheus((RECORDINGS / "metrics_mtp_before.txt").read_text())
    after = parse_prometheus((RECORDINGS / "metrics_mtp_after.txt").read_text())
    assert before[counters.draft_tokens] == 0
    delta = counter_delta(before, after, counters)
    mtp_reports = [read_report(load("chat_mtp.json")), read_report(load("completions_mtp.json")),
                   stream_report("chat_stream_mtp.sse")]
    assert delta.draft_n == sum(r.draft_n or 0 for r in mtp_reports) == 33
    assert delta.draft_accepted == sum(r.draft_accepted or 0 for r in mtp_reports) == 33
    assert after["llamacpp:tokens_predicted_total"] == 72


def test_models_listing_gives_the_alias() -> None:
    ids = tuple(model["id"] for model in load("models_mtp.json")["data"])
    assert common_model({"mtp": ids, "plain": ids}) == "SmolLM2-135M-Instruct.Q4_1"
