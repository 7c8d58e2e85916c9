"""The pool's load: its own in-flight requests plus what others put on an instance."""

from __future__ import annotations

import pytest

from backends.gauges import EngineLoad
from backends.spec import BackendSpec
from policies.decision.finish import time_left
from router.instances.contention import Contention
from router.instances.pool import BEHIND_WINDOW, BackendPool


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


def test_another_replica_s_requests_are_priced_as_it_priced_them() -> None:
    pool = _pool()
    # replica r2 has two requests on "a": 600 ms predicted, sent 200 ms ago; 300 ms, just sent
    pool.note_replica_work("r2", {"a": [(600.0, 200.0), (300.0, 0.0)]}, now=5.0)
    a = _state(pool, "a", 5.0)
    assert a.inflight == 2
    assert a.work().work_ms == pytest.approx(400.0 + 300.0)  # the oldest is a third done
    assert _state(pool, "a", 5.1).work().work_ms == pytest.approx(300.0 + 300.0)
    assert _state(pool, "b", 5.0).inflight == 0
    assert pool.others_inflight("a", 5.0) == 2 and pool.known_inflight("a", 5.0) == 2
    pool.note_replica_work("r2", {"b": [(100.0, 0.0)]}, now=5.2)  # "a" ended, one on "b"
    assert _state(pool, "a", 5.2).inflight == 0 and _state(pool, "b", 5.2).inflight == 1


def test_a_replica_not_heard_from_for_max_age_no_longer_counts() -> None:
    pool = _pool()
    pool.note_replica_work("r2", {"a": [(500.0, 0.0)]}, now=0.0)
    pool.note_replica_work("r3", {"a": [(500.0, 0.0)]}, now=0.8)
    assert _state(pool, "a", 0.9).inflight == 2
    assert _state(pool, "a", 1.5).inflight == 1  # r2 went quiet a second ago: gone, or stopped
    assert pool.others_inflight("a", 2.0) == 0
    pool.note_replica_work("r4", {}, now=2.0)
    assert set(pool.runtime("a").replicas) == {"r4"}  # the quiet ones are forgotten


def test_the_gauges_count_as_bypassers_only_what_no_replica_sent() -> None:
    pool = _pool()
    pool.begin("a", predicted_ms=400.0, now=0.0)
    pool.note_replica_work("r2", {"a": [(400.0, 0.0)]}, now=0.0)
    pool.note_engine_load("a", EngineLoad(running=1, waiting=2), now=0.0)  # ours, r2's, 1 more
    assert pool.runtime("a").bypass == 1
    assert _state(pool, "a", 0.0).inflight == 3
    # r2's request ended while a scrape was out that still counted it: not a bypasser
    known = pool.known_inflight("a", 0.1)
    pool.note_replica_work("r2", {}, now=0.11)
    pool.note_engine_load("a", EngineLoad(running=1, waiting=2), now=0.12, known_at_send=known)
    assert pool.runtime("a").bypass == 1
    assert _state(pool, "a", 0.12).inflight == 2


def test_own_work_is_published_as_each_request_s_prediction_and_elapsed_time() -> None:
    pool = _pool()
    changes: list[int] = []
    pool.watch(lambda: changes.append(1))
    ticket = pool.begin("a", predicted_ms=250.0, now=1.0)
    assert pool.own_work(1.5) == {"a": [(250.0, 500.0)]}
    pool.end("a", ticket, 1.55)
    assert pool.own_work(1.6) == {}
    assert len(changes) == 2  # the replica's publisher is woken at each start and end


def test_a_request_s_length_spread_is_published_and_priced_alike_by_every_replica() -> None:
    # a story predicted 1 s (its length's log-sd 1.5, 13 s at its max_tokens), 2 s in
    mine, theirs = _pool(), _pool()
    mine.begin("a", predicted_ms=1000.0, now=0.0, spread=1.5, most_ms=13_000.0)
    published = mine.own_work(2.0)
    assert published == {"a": [(1000.0, 2000.0, 1.5, 13_000.0)]}
    theirs.note_replica_work("r1", published, now=2.0)
    left = time_left(1000.0, 2000.0, 1.5, 13_000.0)
    assert left > 1000.0  # it outlived its prediction: likelier long than nearly done
    assert _state(mine, "a", 2.0).work().work_ms == pytest.approx(left)
    assert _state(theirs, "a", 2.0).work().work_ms == pytest.approx(left)
    # a replica that publishes no spread (an older release) is priced by the old rule
    theirs.note_replica_work("r1", {"a": [(1000.0, 2000.0)]}, now=2.0)
    assert _state(theirs, "a", 2.0).work().work_ms == pytest.approx(0.2 * 1000.0)


def test_a_request_of_ours_that_ended_while_the_scrape_was_out_is_not_someone_else_s() -> None:
    pool = _pool()
    ticket = pool.begin("a", predicted_ms=100.0, now=0.0)
    sent_with = pool.runtime("a").inflight  # 1 when the scrape went out
    pool.end("a", ticket, 0.005)  # ours ended; the engine's answer still counts it
    pool.note_engine_load("a", EngineLoad(1, 0), now=0.01, known_at_send=sent_with)
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
    # the other waited behind it: served from now on, its whole request is ahead
    assert _state(pool, "a", 0.9).work().work_ms == pytest.approx(1000.0)
    assert _state(pool, "a", 1.0).work().work_ms == pytest.approx(900.0)


def test_a_request_that_waited_is_served_only_since_the_one_before_it_ended() -> None:
    pool = _pool()
    first = pool.begin("a", predicted_ms=400.0, now=0.0)
    pool.begin("a", predicted_ms=400.0, now=0.01)  # waits 390 ms behind the first
    pool.end("a", first, 0.4)
    # 20 ms into its service, not 410 ms since it was sent (which would be "overrun, a fifth")
    assert _state(pool, "a", 0.42).work().work_ms == pytest.approx(380.0)


def test_another_replica_s_request_that_ended_frees_the_instance_for_the_next() -> None:
    pool = _pool()
    pool.note_replica_work("r2", {"a": [(400.0, 10.0), (400.0, 0.0)]}, now=0.01)
    pool.note_replica_work("r2", {"a": [(400.0, 390.0)]}, now=0.4)  # the older one ended
    assert _state(pool, "a", 0.42).work().work_ms == pytest.approx(380.0)
    # the same request heard again, its sent time rebuilt 8 ms later (the channel's jitter):
    # nothing ended, it is still 30 ms in, not just started
    pool.note_replica_work("r2", {"a": [(400.0, 412.0)]}, now=0.43)
    assert _state(pool, "a", 0.43).work().work_ms == pytest.approx(370.0)


def _two_pairs() -> list[BackendSpec]:
    return [BackendSpec(name=n, engine="llamacpp", profile=p, url=f"http://127.0.0.1:{i + 1}")
            for i, (n, p) in enumerate((("mtp-0", "mtp"), ("plain-0", "plain"),
                                        ("mtp-1", "mtp"), ("plain-1", "plain")))]


def _sharing(me: str, other: str, now: float = 0.0) -> BackendPool:
    """A replica `me` that has heard from `other` (with nothing in flight)."""
    pool = BackendPool(_two_pairs(), load_max_age_s=1.0)
    pool.share_with(me)
    pool.note_replica_work(other, {}, now)
    return pool


def test_replicas_rank_equal_instances_differently_so_that_ties_spread() -> None:
    first, second = _sharing("a", "b"), _sharing("b", "a")

    def preferred(pool: BackendPool, profile: str) -> str:
        return min((s for s in pool.states(0.0) if s.profile == profile),
                   key=lambda s: s.tie_rank).name

    assert preferred(first, "plain") == "plain-0" and preferred(second, "plain") == "plain-1"
    assert preferred(first, "mtp") == "mtp-0" and preferred(second, "mtp") == "mtp-1"
    assert sorted(s.tie_rank for s in second.states(0.0)) == [0, 1, 2, 3]
    alone = BackendPool(_two_pairs())
    alone.share_with("a")
    assert [s.tie_rank for s in alone.states(0.0)] == [0, 1, 2, 3]  # nobody to share with


def test_a_blind_request_that_met_an_earlier_one_of_another_replica_is_a_collision() -> None:
    pool = _sharing("a", "b", now=10.0)
    assert pool.contention.risk() == 0.0  # no risk assumed
    alone = BackendPool(_two_pairs())
    alone.share_with("a")
    alone.end("mtp-1", alone.begin("mtp-1", now=0.0), 0.4)
    assert alone.contention.watched == Contention().watched  # nobody to meet: not watched
    # mtp-1 is b's share and looks free: a's request there is watched
    ticket = pool.begin("mtp-1", predicted_ms=400.0, now=10.0)
    # b's work arrives: its request on mtp-1 started 5 ms before a's (a could not know)
    pool.note_replica_work("b", {"mtp-1": [(400.0, 7.0)]}, now=10.002)
    assert pool.contention.collided == pytest.approx(1.0)
    risk = pool.contention.risk()
    assert risk > 0.0
    pool.end("mtp-1", ticket, 10.4)  # counted once
    assert pool.contention.risk() == pytest.approx(risk)
    # a free instance in b's share now costs a its risk; its own share and a busy one nothing
    pool.note_replica_work("b", {}, now=11.0)  # b's request there ended
    contended = {s.name: s.contended for s in pool.states(11.0)}
    assert contended["mtp-1"] == pytest.approx(risk) and contended["plain-1"] == pytest.approx(risk)
    assert contended["mtp-0"] == 0.0 and contended["plain-0"] == 0.0
    pool.note_replica_work("b", {"plain-1": [(400.0, 0.0)]}, now=11.0)
    assert {s.name: s.contended for s in pool.states(11.0)}["plain-1"] == 0.0


def test_a_request_started_within_the_channel_s_latency_after_a_blind_one_met_it_too() -> None:
    pool = _sharing("a", "b", now=10.0)
    pool.begin("mtp-1", predicted_ms=400.0, now=10.0)
    # b's request there, heard 3 ms after a's start: started after it, as heard
    pool.note_replica_work("b", {"mtp-1": [(400.0, 0.0)]}, now=10.003, blind_s=0.001)
    assert pool.contention.collided == 0.0  # later than the latency allows: b knew of a's
    pool.begin("plain-1", predicted_ms=400.0, now=10.0)
    pool.note_replica_work("b", {"plain-1": [(400.0, 0.0)]}, now=10.003, blind_s=0.004)
    assert pool.contention.collided == pytest.approx(1.0)  # within it: neither could know


def test_blind_requests_that_met_nobody_lower_the_risk_and_known_ones_are_not_watched() -> None:
    pool = _sharing("a", "b")
    first = pool.begin("plain-1", predicted_ms=400.0, now=1.0)
    pool.note_replica_work("b", {"plain-1": [(400.0, 0.0)]}, now=1.001)  # b's came after a's
    assert pool.contention.collided == 0.0
    pool.begin("mtp-1", predicted_ms=400.0, now=1.0)
    pool.note_replica_work("b", {"mtp-1": [(400.0, 500.0)]}, now=1.002)  # before: collision
    pool.end("plain-1", first, 1.4)
    pool.note_replica_work("b", {}, now=1.5)  # b's requests ended too
    high, watched = pool.contention.risk(), pool.contention.watched
    for t in range(20):  # blind requests that ended having met nobody, in either share
        pool.note_replica_work("b", {}, now=2.0 + t)  # b's heartbeat: heard, with nothing
        pool.end("mtp-0", pool.begin("mtp-0", now=2.0 + t), 2.5 + t)
        pool.end("plain-1", pool.begin("plain-1", now=2.0 + t), 2.5 + t)
    assert 0.0 < pool.contention.risk() < high
    assert pool.contention.watched > watched + 30
    watched = pool.contention.watched
    pool.note_replica_work("b", {"mtp-1": [(400.0, 0.0)]}, now=30.0)
    pool.begin("mtp-1", now=30.0)  # busy with b's request, known: not blind
    pool.note_replica_work("b", {"mtp-1": [(400.0, 900.0)]}, now=30.001)
    assert pool.contention.watched == pytest.approx(watched)


def test_the_shares_follow_the_replicas_heard_from() -> None:
    pool = _sharing("b", "a", now=0.0)
    assert {s.name for s in pool.states(0.0) if s.tie_rank < 2} == {"mtp-1", "plain-1"}
    pool.refresh_shares(5.0)  # a not heard from for max_age: b is alone, and shares nothing
    assert all(s.contended == 0.0 for s in pool.states(5.0))
    assert [s.tie_rank for s in pool.states(5.0)] == [0, 1, 2, 3]


def test_each_instance_has_one_owner_and_both_replicas_agree_on_it() -> None:
    first, second = _sharing("a", "b"), _sharing("b", "a")
    owners = {name: first.owner(name) for name in first.names}
    assert owners == {"mtp-0": "a", "plain-0": "a", "mtp-1": "b", "plain-1": "b"}
    assert {name: second.owner(name) for name in second.names} == owners
    assert {s.name for s in first.states(0.0) if s.tie_rank < 2} == {"mtp-0", "plain-0"}
    assert {s.name for s in second.states(0.0) if s.tie_rank < 2} == {"mtp-1", "plain-1"}
    first.refresh_shares(5.0)  # b not heard from since: a is alone and owns nothing apart
    assert all(first.owner(name) == "a" for name in first.names)
    alone = BackendPool(_two_pairs())
    assert alone.owner("mtp-0") == ""  # no replicas at all


def test_others_unheard_while_sharing_once_none_is_heard_within_max_age() -> None:
    alone = BackendPool(_two_pairs(), load_max_age_s=1.0)
    assert not alone.others_unheard(0.0)  # one process: nobody to hear
    alone.share_with("a")
    assert not alone.others_unheard(5.0)  # a replica that has met no other is alone
    pool = _sharing("a", "b", now=0.0)
    assert not pool.others_unheard(0.9)
    assert pool.others_unheard(1.1)  # b quiet for max_age, the shares still dealt
    pool.note_replica_work("b", {}, now=1.2)
    assert not pool.others_unheard(1.2)


def test_a_lost_channel_stops_the_others_work_counting_at_once_and_keeps_the_shares() -> None:
    pool = _sharing("a", "b", now=0.0)
    ranks = [s.tie_rank for s in pool.states(0.0)]
    pool.note_replica_work("b", {"mtp-1": [(400.0, 0.0)]}, now=0.0)
    assert _state(pool, "mtp-1", 0.1).inflight == 1
    pool.lost_others()
    assert pool.others_unheard(0.1)
    assert _state(pool, "mtp-1", 0.1).inflight == 0  # b's request ends unheard: not counted
    # the gauges count it beyond this replica's own requests from their next read
    pool.note_engine_load("mtp-1", EngineLoad(1, 0), now=0.12)
    assert _state(pool, "mtp-1", 0.12).inflight == 1 and pool.runtime("mtp-1").bypass == 1
    assert [s.tie_rank for s in pool.states(0.12)] == ranks  # b unheard, not gone


def test_blind_requests_are_not_watched_while_the_others_are_unheard() -> None:
    pool = _sharing("a", "b", now=0.0)
    pool.begin("mtp-1", predicted_ms=400.0, now=0.1)
    assert pool.runtime("mtp-1").blind
    pool.lost_others()
    assert not pool.runtime("mtp-1").blind  # whether it met b's requests can't be told now
    watched = pool.contention.watched
    for t in range(10):  # unheard, every one would look like one that met nobody
        pool.end("plain-1", pool.begin("plain-1", now=0.2 + t), 0.7 + t)
    assert pool.contention.watched == watched
    assert pool.contention.risk() == 0.0


def test_a_busy_instance_carries_what_the_recent_requests_lost_had_it_been_taken() -> None:
    pool = _pool()
    pool.note_losses({"a": 300.0, "b": 0.0})
    pool.note_losses({"a": 0.0, "b": 0.0})
    pool.begin("a", predicted_ms=400.0, now=0.0)
    assert _state(pool, "a", 0.1).behind.losses_ms == (0.0, 300.0)
    assert _state(pool, "b", 0.1).behind.losses_ms == ()  # idle: nobody can queue behind
    pool.note_losses({"a": 100.0, "gone": 5.0})  # an instance no longer configured: ignored
    assert _state(pool, "a", 0.2).behind.losses_ms == (0.0, 100.0, 300.0)


def test_the_losses_kept_are_the_latest_window() -> None:
    pool = _pool()
    for i in range(BEHIND_WINDOW + 5):
        pool.note_losses({"a": float(i)})
    pool.begin("a", predicted_ms=400.0, now=0.0)
    assert _state(pool, "a", 0.1).behind.losses_ms == tuple(
        float(i) for i in range(5, BEHIND_WINDOW + 5))


def test_each_request_gets_the_batch_it_ran_in_every_request_on_the_instance_counted() -> None:
    spec = BackendSpec(name="a", engine="llamacpp", profile="plain", url="http://127.0.0.1:1",
                       slots=4)
    pool = BackendPool([spec])
    first = pool.begin("a", 1000.0, 0.0)
    second = pool.begin("a", 1000.0, 1.0)
    # a bypasser seen by the engine's gauges from t=1.5 on counts too
    pool.note_engine_load("a", EngineLoad(running=3, waiting=0), 1.5)
    batch = pool.end("a", second, 2.0)
    assert batch is not None and batch.start == 2 and batch.mean == pytest.approx(2.5)
    batch = pool.end("a", first, 4.0)
    # 1 alone for 1 s, 2 for 0.5 s, 3 for 0.5 s, then 2 (itself and the bypasser) for 2 s
    assert batch is not None and batch.start == 1 and batch.mean == pytest.approx(7.5 / 4)
    assert pool.end("a", 999, 5.0) is None  # not one of its tickets


def test_the_batch_is_capped_at_the_slots_and_a_queue_of_one_is_always_one() -> None:
    one = BackendPool([BackendSpec(name="a", engine="llamacpp", profile="plain",
                                   url="http://127.0.0.1:1")])
    tickets = [one.begin("a", 100.0, 0.0) for _ in range(3)]
    assert one.end("a", tickets[0], 1.0) == (1, 1.0)
    pool = BackendPool([BackendSpec(name="a", engine="llamacpp", profile="plain",
                                    url="http://127.0.0.1:1")])
    pool.set_slots("a", 2, "engine")
    assert pool.describe(0.0)[0]["slots"] == 2
    tickets = [pool.begin("a", 100.0, 0.0) for _ in range(3)]
    batch = pool.end("a", tickets[2], 1.0)
    assert batch is not None and batch.start == 2 and batch.mean == pytest.approx(2.0)
    state = pool.states(1.0)[0]
    assert state.slots == 2 and len(state.work().serving) == 2
