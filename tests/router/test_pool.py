"""The pool's load: its own in-flight requests plus what others put on an instance."""

from __future__ import annotations

import pytest

from backends.gauges import EngineLoad
from backends.spec import BackendSpec
from router.pool import BackendPool


def _pool() -> BackendPool:
    specs = [BackendSpec(name=n, engine="llamacpp", profile="plain", url=f"http://127.0.0.1:{p}")
             for n, p in (("a", 1), ("b", 2))]
    return BackendPool(specs, load_max_age_s=1.0)


def _state(pool: BackendPool, name: str, now: float):  # type: ignore[no-untyped-def]
    return next(s for s in pool.states(now) if s.name == name)


def test_what_the_gauges_count_beyond_our_own_requests_is_someone_else_s() -> None:
    pool = _pool()
    pool.begin("a", predicted_ms=400.0, now=10.0)
    pool.note_engine_load("a", EngineLoad(running=1, waiting=2), now=10.0)  # ours and 2 more
    state = _state(pool, "a", 10.0)
    assert state.inflight == 3
    assert state.work().requests == 3
    # the two others are priced at the instance's typical request (400 ms) on top of ours
    assert state.work().work_ms == 400.0 + 2 * 400.0
    # timed as ours are: 0.3 s on, the oldest (ours) has 100 ms left, the others are whole
    assert _state(pool, "a", 10.3).work().work_ms == pytest.approx(100.0 + 2 * 400.0)
    assert _state(pool, "b", 10.0).inflight == 0


def test_a_gauge_that_counts_fewer_than_we_sent_adds_nothing() -> None:
    pool = _pool()
    for _ in range(3):
        pool.begin("a", predicted_ms=100.0, now=0.0)
    pool.note_engine_load("a", EngineLoad(1, 0), now=0.0)  # two of ours not arrived yet
    assert _state(pool, "a", 0.0).inflight == 3


def test_load_seen_too_long_ago_is_no_longer_counted() -> None:
    pool = _pool()
    pool.note_engine_load("a", EngineLoad(2, 0), now=0.0)
    assert _state(pool, "a", 0.5).inflight == 2
    assert _state(pool, "a", 1.5).inflight == 0


def test_other_replicas_counts_stand_in_where_no_gauge_is_fresh() -> None:
    pool = _pool()
    pool.begin("b", predicted_ms=250.0, now=0.0)
    pool.end("b", 1)
    pool.note_shared_inflight({"a": 2, "b": -4}, now=5.0)  # a negative count is nothing
    assert _state(pool, "a", 5.0).inflight == 2
    # "a" has no typical request of its own: the others are priced at the pool's mean
    assert _state(pool, "a", 5.0).work().work_ms == pytest.approx(2 * 250.0)
    assert _state(pool, "b", 5.0).inflight == 0
    pool.note_engine_load("a", EngineLoad(0, 0), now=5.1)  # a fresh gauge wins
    assert _state(pool, "a", 5.2).inflight == 0
    assert pool.own_inflight() == {"a": 0, "b": 0}


def test_a_request_of_ours_that_ended_while_the_scrape_was_out_is_not_someone_else_s() -> None:
    pool = _pool()
    ticket = pool.begin("a", predicted_ms=100.0, now=0.0)
    sent_with = pool.runtime("a").inflight  # 1 when the scrape went out
    pool.end("a", ticket)  # ours ended; the engine's answer still counts it
    pool.note_engine_load("a", EngineLoad(1, 0), now=0.01, inflight_at_send=sent_with)
    assert _state(pool, "a", 0.02).inflight == 0


def test_a_request_of_others_that_has_run_long_is_nearly_done_not_a_whole_request_more() -> None:
    pool = _pool()
    for now in (0.0, 0.25, 0.5, 0.75):  # b: a request of ours, then one more for comparison
        pool.note_engine_load("a", EngineLoad(1, 0), now=now)  # one of others', seen at 0
    pool.begin("b", predicted_ms=1000.0, now=0.7)
    a, b = _state(pool, "a", 0.8), _state(pool, "b", 0.8)
    assert a.work().work_ms == pytest.approx(200.0)  # 1000 ms typical (the pool's mean), 800 ms gone
    assert b.work().work_ms == pytest.approx(900.0)
    pool.note_engine_load("a", EngineLoad(2, 0), now=0.8)  # a second one arrives
    assert _state(pool, "a", 0.8).work().work_ms == pytest.approx(200.0 + 1000.0)
    pool.note_engine_load("a", EngineLoad(1, 0), now=0.9)  # the oldest ended
    assert _state(pool, "a", 0.9).work().work_ms == pytest.approx(1000.0 - 100.0)
