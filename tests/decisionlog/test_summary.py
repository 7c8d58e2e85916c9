"""Per-class aggregates shared by tail, report and the dashboard (pure)."""

from __future__ import annotations

import pytest

from decisionlog.records import RouteRecord
from decisionlog.summary import by_class_lang, summarize, timeline, total
from tests.decisionlog.examples import make_record


def _one(records: list[RouteRecord]) -> object:
    (group,) = summarize(records)
    return group


@pytest.mark.parametrize(
    ("records", "field", "expected"),
    [
        # throughput: 100 tok at 20 tok/s (5 s) + 300 tok at 30 tok/s (10 s) = 400 / 15 s
        ([make_record(tps=20, tokens=100), make_record(tps=30, tokens=300)], "tps_mtp", 400 / 15),
        ([make_record(profile="plain", tps=10, tokens=50)], "tps_plain", 10.0),
        ([make_record(tps=None)], "tps_mtp", None),
        # acceptance pooled over drafted tokens: (8 + 15) / (10 + 30)
        ([make_record(draft_n=10, accepted=8), make_record(draft_n=30, accepted=15)],
         "acceptance", 23 / 40),
        ([make_record(profile="plain")], "acceptance", None),
        # share of successful requests served by mtp; the failed one is an error, not a share
        ([make_record(), make_record(), make_record(), make_record(profile="plain"),
          make_record(status=502, error="upstream")], "mtp_share", 3 / 4),
        ([make_record(), make_record(status=502)], "errors", 1),
        ([make_record(explored=True), make_record(), make_record(), make_record()],
         "explored_share", 0.25),
        ([make_record(speedup=1.1), make_record(speedup=0.9)], "predicted_speedup", 1.0),
        ([make_record(ttft_ms=100), make_record(ttft_ms=300), make_record(ttft_ms=200)],
         "ttft_p50_mtp", 200.0),
        # routed: 100 tok @ 20 (5 s) on mtp + 100 tok @ 10 (10 s) on plain = 15 s;
        # always-mtp: 200 / 20 = 10 s -> routing was 1/3 slower; never-mtp: 20 s -> 1/3 faster
        ([make_record(tps=20), make_record(profile="plain", tps=10)], "gain_vs_always_mtp",
         10 / 15 - 1),
        ([make_record(tps=20), make_record(profile="plain", tps=10)], "gain_vs_never_mtp",
         20 / 15 - 1),
        ([make_record(tps=20)], "gain_vs_never_mtp", None),
    ],
)
def test_group_fields(records: list[RouteRecord], field: str, expected: float | None) -> None:
    value = getattr(_one(records), field)
    if expected is None:
        assert value is None
    else:
        assert value == pytest.approx(expected)


def test_speedup_is_mtp_over_plain_tokens_per_second() -> None:
    group = _one([make_record(tps=15), make_record(profile="plain", tps=12)])
    assert group.speedup == pytest.approx(1.25)  # type: ignore[attr-defined]


def test_groups_are_sorted_by_requests_and_keyed_as_asked() -> None:
    records = [make_record(cls="chat"), make_record(cls="code", lang="zh"),
               make_record(cls="code", lang="en")]
    assert [g.key for g in summarize(records)] == ["code", "chat"]
    assert [g.key for g in summarize(records, by_class_lang)] == ["chat/en", "code/en", "code/zh"]


def test_total_gain_adds_up_time_over_the_groups() -> None:
    records = [
        make_record(cls="code", tps=20), make_record(cls="code", profile="plain", tps=10),
        make_record(cls="chat", profile="plain", tps=10), make_record(cls="chat", tps=5),
    ]
    groups = summarize(records)
    overall = total(groups, records)
    # routed 5 + 10 + 10 + 20 = 45 s; always-mtp 10 + 40 = 50 s; never-mtp 20 + 20 = 40 s
    assert overall.requests == 4
    assert overall.gain_vs_always_mtp == pytest.approx(50 / 45 - 1)
    assert overall.gain_vs_never_mtp == pytest.approx(40 / 45 - 1)


def test_timeline_buckets_by_record_time() -> None:
    records = [
        make_record(ts="2026-11-29T12:00:01+00:00", draft_n=10, accepted=9),
        make_record(ts="2026-11-29T12:00:59Z", draft_n=10, accepted=7),
        make_record(ts="2026-11-29T12:01:30+00:00", draft_n=10, accepted=5),
        make_record(ts="not a time"),
    ]
    buckets = timeline(records, 60)
    assert [b.start for b in buckets] == ["2026-11-29T12:00:00+00:00", "2026-11-29T12:01:00+00:00"]
    assert [b.groups[0].acceptance for b in buckets] == [pytest.approx(0.8), pytest.approx(0.5)]
    with pytest.raises(ValueError):
        timeline(records, 0)


def test_like_with_like_sets_requests_against_those_the_router_judged_alike() -> None:
    # chat: what the router took for plain chat (predicted 0.96) ran at 10 tok/s on plain and,
    # the few explored, 9.6 on mtp; turns it misread as agent-like (predicted 1.09) all went to
    # mtp and ran at 12. The raw ratio sets those against the plain chat: a gain that is not.
    records = (
        [make_record(cls="chat", profile="plain", tps=10.0, speedup=0.96)] * 8
        + [make_record(cls="chat", tps=9.6, speedup=0.96)] * 2
        + [make_record(cls="chat", tps=12.0, speedup=1.09)] * 6
    )
    (chat,) = summarize(records)
    assert chat.speedup is not None and chat.speedup > 1.0
    assert chat.matched_speedup == pytest.approx(0.96)
    assert chat.predicted_speedup == pytest.approx((10 * 0.96 + 6 * 1.09) / 16)


def test_gate_skip_share_counts_the_cycles_the_gate_skipped() -> None:
    # 100 tokens: 30 verified cycles with 20 accepted give 50, the other 50 were skipped cycles
    group = _one([make_record(tokens=100, draft_n=30, accepted=20)])
    assert group.gate_skip == pytest.approx(50 / 80)  # type: ignore[attr-defined]
    assert _one([make_record(profile="plain")]).gate_skip is None  # type: ignore[attr-defined]
