"""The finish rule's cost: this request's predicted finish, plus the delay it imposes on each
request expected to come while it is served (as many as the instance holds now): its service
time for those that must wait, what they lose elsewhere for those an idle instance takes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.decision.finish import (
    NOTHING_BEHIND,
    Behind,
    Candidate,
    InFlight,
    Queued,
    Running,
    exploration_bound,
    losses_if_taken,
    queued_ms,
    queued_work,
    soonest,
    time_left,
)

TOKENS = 64.0


def _candidate(name: str, profile: str, queue_ms: float, ms_per_token: float, waiting: int,
               sampled_ms_per_token: float | None = None) -> Candidate:
    drawn = ms_per_token if sampled_ms_per_token is None else sampled_ms_per_token
    return Candidate(name, profile, queue_ms, 100.0, ms_per_token, drawn, waiting=waiting)


def test_the_cost_adds_the_service_time_once_per_request_expected_behind() -> None:
    c = _candidate("mtp-0", "mtp", 500.0, 60.0, waiting=2)
    service = 100.0 + TOKENS * 60.0
    assert c.service_ms(TOKENS) == pytest.approx(service)
    assert c.finish_ms(TOKENS) == pytest.approx(500.0 + service)
    assert c.cost_ms(TOKENS) == pytest.approx(500.0 + 3 * service)


def test_idle_instances_reduce_to_the_soonest_finish() -> None:
    fast, slow = _candidate("mtp-0", "mtp", 0.0, 62.0, 0), _candidate("plain-0", "plain", 0.0,
                                                                        68.0, 0)
    assert fast.cost_ms(TOKENS) == fast.finish_ms(TOKENS)
    choice = soonest([slow, fast], TOKENS, max_regret=0.0)
    assert choice is not None and choice.candidate.name == "mtp-0"


def test_under_load_a_faster_pace_beats_a_slightly_sooner_finish() -> None:
    # two requests on each: plain finishes this one 204 ms sooner, but mtp's pace saves 384 ms
    # for each of the two expected to queue behind it
    mtp = _candidate("mtp-0", "mtp", 1000.0, 62.0, waiting=2)
    plain = _candidate("plain-0", "plain", 412.0, 68.0, waiting=2)
    assert plain.finish_ms(TOKENS) < mtp.finish_ms(TOKENS)
    choice = soonest([mtp, plain], TOKENS, max_regret=0.0)
    assert choice is not None and choice.candidate.name == "mtp-0"
    # the choice reports each instance's predicted finish, not its cost
    assert choice.finish_ms == {"mtp-0": mtp.finish_ms(TOKENS), "plain-0": plain.finish_ms(TOKENS)}
    idle = soonest([_candidate("mtp-0", "mtp", 1000.0, 62.0, 0),
                    _candidate("plain-0", "plain", 412.0, 68.0, 0)], TOKENS, max_regret=0.0)
    assert idle is not None and idle.candidate.name == "plain-0"


def test_a_request_behind_loses_its_loss_elsewhere_or_the_whole_service_whichever_is_less(
) -> None:
    behind = Behind.of([50.0, 0.0, float("inf"), 0.0])
    assert behind.losses_ms == (0.0, 0.0, 50.0, float("inf"))
    # a 100 ms service: two lose nothing, one 50 (it goes elsewhere), one waits the 100
    assert behind.delay_ms(100.0) == pytest.approx((0 + 0 + 50 + 100) / 4)
    assert behind.delay_ms(10.0) == pytest.approx((0 + 0 + 10 + 10) / 4)
    assert NOTHING_BEHIND.delay_ms(100.0) == 100.0  # nothing measured: the one behind waits


@given(st.lists(st.floats(0.0, 1e6) | st.just(float("inf")), min_size=1, max_size=40),
       st.floats(0.0, 1e6))
def test_the_delay_is_the_mean_of_each_loss_capped_by_the_service(losses: list[float],
                                                                   service: float) -> None:
    expected = sum(min(loss, service) for loss in losses) / len(losses)
    assert Behind.of(losses).delay_ms(service) == pytest.approx(expected)


def test_each_instance_s_loss_is_the_soonest_finish_elsewhere_less_its_own() -> None:
    assert losses_if_taken({"ngram": 400.0, "plain": 1000.0, "draft": 1600.0}) == {
        "ngram": 600.0, "plain": 0.0, "draft": 0.0}
    assert losses_if_taken({"a": 500.0, "b": 500.0}) == {"a": 0.0, "b": 0.0}
    assert losses_if_taken({"only": 500.0}) == {"only": float("inf")}


def test_with_an_idle_instance_elsewhere_the_one_behind_is_priced_at_its_loss_there() -> None:
    # n-gram serves this edit in 3 s after 5 s of another client's request; plain, idle, in 10 s.
    # Priced as if the next request had to wait its 3 s, the wait looks dear (11 s > 10 s);
    # the recent requests lost nothing elsewhere when n-gram was taken (chat, stories as fast
    # on plain): the next one goes to plain, and waiting for n-gram finishes this one 2 s sooner
    ngram = Candidate("ngram", "mtp", 5000.0, 0.0, 3000.0 / TOKENS, 3000.0 / TOKENS, waiting=1,
                      behind=Behind.of([0.0] * 8))
    plain = Candidate("plain", "plain", 0.0, 0.0, 10000.0 / TOKENS, 10000.0 / TOKENS)
    assert ngram.cost_ms(TOKENS) == pytest.approx(11000.0)  # no idle instance elsewhere
    assert ngram.cost_ms(TOKENS, idle_elsewhere=1) == pytest.approx(8000.0)
    choice = soonest([ngram, plain], TOKENS, max_regret=0.0)
    assert choice is not None and choice.candidate.name == "ngram"
    assert choice.losses_ms == {"ngram": 2000.0, "plain": 0.0}
    unmeasured = soonest([ngram._replace(behind=NOTHING_BEHIND), plain], TOKENS, max_regret=0.0)
    assert unmeasured is not None and unmeasured.candidate.name == "plain"
    # with every instance busy the one behind has nowhere to go: it waits the whole service
    assert ngram._replace(waiting=2).cost_ms(TOKENS, idle_elsewhere=1) == pytest.approx(
        5000.0 + 3000.0 + 0.0 + 3000.0)


def test_a_draw_for_a_config_unlearned_on_such_requests_is_followed_within_its_spread() -> None:
    # the draw makes mtp look faster; at the mean it costs ~5% more, over the 2% bound
    mtp = _candidate("mtp-0", "mtp", 0.0, 68.0 * 1.05, 0, sampled_ms_per_token=50.0)
    plain = _candidate("plain-0", "plain", 0.0, 68.0, 0)
    learned = soonest([mtp, plain], TOKENS, max_regret=0.02)
    assert learned is not None and learned.candidate.name == "plain-0"
    # its spread for requests like this one still the prior's (sd 0.15): within it, followed
    unlearned = soonest([mtp._replace(unlearned_sd=0.15), plain], TOKENS, max_regret=0.02)
    assert unlearned is not None and unlearned.candidate.name == "mtp-0" and unlearned.explored
    # a loss wider than its spread is told by the evidence already: not followed
    narrow = soonest([mtp._replace(unlearned_sd=0.03), plain], TOKENS, max_regret=0.02)
    assert narrow is not None and narrow.candidate.name == "plain-0"
    # no exploration at all when the bound is 0
    off = soonest([mtp._replace(unlearned_sd=0.15), plain], TOKENS, max_regret=0.0)
    assert off is not None and off.candidate.name == "plain-0"


def test_exploration_is_bounded_by_the_regret_in_cost() -> None:
    # the draw makes mtp look faster; following it costs ~2% more (one expected behind on each)
    mtp = _candidate("mtp-0", "mtp", 0.0, 68.0 * 1.02, 1, sampled_ms_per_token=50.0)
    plain = _candidate("plain-0", "plain", 0.0, 68.0, 1)
    regret = mtp.cost_ms(TOKENS) / plain.cost_ms(TOKENS) - 1.0
    assert 0.015 < regret < 0.025
    tight = soonest([mtp, plain], TOKENS, max_regret=regret - 0.001)
    loose = soonest([mtp, plain], TOKENS, max_regret=regret + 0.001)
    assert tight is not None and tight.candidate.name == "plain-0" and not tight.explored
    assert loose is not None and loose.candidate.name == "mtp-0" and loose.explored


@pytest.mark.parametrize(("tokens", "typical", "bound"), [
    (100.0, 250.0, 0.02),  # shorter than typical: the whole bound
    (250.0, 250.0, 0.02),
    (500.0, 250.0, 0.01),  # twice as long: half of it, the same cost in ms as a typical one's
    (0.0, 250.0, 0.02),
])
def test_the_exploration_bound_is_tighter_on_a_longer_answer(
        tokens: float, typical: float, bound: float) -> None:
    assert exploration_bound(0.02, tokens, typical) == pytest.approx(bound)
    assert exploration_bound(0.0, tokens, typical) == 0.0  # off stays off


def test_no_candidate_no_choice() -> None:
    assert soonest([], TOKENS, max_regret=0.1) is None


def test_the_queue_is_the_oldest_requests_remainder_then_the_others_whole() -> None:
    assert queued_ms([]) == 0.0
    queue = [InFlight(predicted_ms=1000.0, elapsed_ms=100.0),
             InFlight(predicted_ms=2000.0, elapsed_ms=300.0)]
    assert queued_ms(queue) == pytest.approx(1700.0 + 1000.0)
    overrun = [InFlight(predicted_ms=1000.0, elapsed_ms=5000.0)]
    assert queued_ms(overrun) == pytest.approx(200.0)  # busy, not done


def test_the_oldest_request_is_served_only_since_the_instance_was_last_freed() -> None:
    # sent at 0 s, it waited behind another that ended at 0.4 s: at 0.5 s it is 100 ms in
    waited = queued_work([Running(400.0, 0.0)], 0.5, freed_at=0.4)
    assert waited.work_ms == pytest.approx(300.0)
    # freed before it was sent: served since it was sent
    assert queued_work([Running(400.0, 0.3)], 0.5, freed_at=0.1).work_ms == pytest.approx(200.0)
    assert queued_work([Running(400.0, 0.0)], 0.5).work_ms == pytest.approx(80.0)  # overran


def test_a_request_that_outlived_its_prediction_is_likelier_long_than_nearly_done() -> None:
    # not started: its mean; at its prediction, a log-normal's remaining life given that
    assert time_left(1000.0, 0.0, spread=0.7) == pytest.approx(1000.0)
    assert time_left(1000.0, 1000.0, spread=0.7) == pytest.approx(753.5, abs=1.0)
    assert time_left(1000.0, 1000.0, spread=1.5) == pytest.approx(2412.5, abs=1.0)
    # the wider its length's spread, the more is left of one that overran
    lefts = [time_left(1000.0, 2000.0, spread=s) for s in (0.3, 0.7, 1.1, 1.5)]
    assert lefts == sorted(lefts) and lefts[0] < 1000.0 < lefts[-1]
    # an edit known to within a few percent, half done, has about half left
    assert time_left(1000.0, 500.0, spread=0.05) == pytest.approx(500.0, rel=0.01)


def test_a_request_near_its_cap_has_only_the_cap_left() -> None:
    # a story predicted 1 s that may run to 13 s (its max_tokens): 12 s in, under 1 s left
    assert time_left(1000.0, 12_000.0, spread=1.5, most_ms=13_000.0) < 1000.0
    uncapped = time_left(1000.0, 1000.0, spread=1.5)
    assert time_left(1000.0, 1000.0, spread=1.5, most_ms=13_000.0) < uncapped
    # past the time its cap was predicted to take, it is nearly done (still busy)
    assert time_left(1000.0, 14_000.0, spread=1.5, most_ms=13_000.0) == pytest.approx(200.0)


def test_with_no_spread_known_the_old_rule_holds() -> None:
    # another replica of an older release, a bypasser at the typical request
    assert time_left(1000.0, 400.0) == pytest.approx(600.0)
    assert time_left(1000.0, 5000.0) == pytest.approx(200.0)
    assert queued_work([Running(1000.0, 0.0, 0.7, 0.0)], 2.0).work_ms == pytest.approx(
        time_left(1000.0, 2000.0, 0.7))


@given(st.floats(1.0, 1e6), st.floats(0.0, 1e7), st.floats(0.0, 4.0), st.floats(0.0, 1e7))
def test_the_time_left_is_finite_and_never_negative(
    predicted: float, ran: float, spread: float, most: float
) -> None:
    left = time_left(predicted, ran, spread, most)
    assert 0.0 <= left < float("inf")
    if most > 0.0 and spread > 0.0:  # never past its cap (or past it, a share of the mean)
        assert left <= max(most - ran, 0.2 * predicted) + 1e-6 * most


_RUNNING = st.lists(st.builds(Running, st.floats(0.0, 1e6), st.floats(0.0, 100.0),
                              st.floats(0.0, 2.0), st.floats(0.0, 1e7)), max_size=40)


@given(_RUNNING, st.floats(0.0, 100.0))
def test_the_pools_summary_of_its_in_flight_table_is_the_same_work(
    running: list[Running], now: float
) -> None:
    """`queued_work` over (predicted ms, sent at, spread, cap) as the proxy's pool keeps them:
    the request count and `queued_ms` of the same requests seen at `now` (sent later than
    `now`: 0 ms in)."""
    inflight = [InFlight(r.predicted_ms, (now - r.sent) * 1000.0 if now > r.sent else 0.0,
                         r.spread, r.most_ms) for r in running]
    work = queued_work(running, now)
    assert work.requests == len(running)
    assert work.work_ms == pytest.approx(queued_ms(inflight), rel=1e-9, abs=1e-6)
    assert queued_work([], now) == Queued(0, 0.0)


def test_among_equal_costs_the_caller_s_tie_rank_decides_before_the_name() -> None:
    a = Candidate("plain-0", "plain", 0.0, 100.0, 68.0, 68.0, tie_rank=1)
    b = Candidate("plain-1", "plain", 0.0, 100.0, 68.0, 68.0, tie_rank=0)
    choice = soonest([a, b], TOKENS, max_regret=0.0)
    assert choice is not None and choice.candidate.name == "plain-1"
    dearer = Candidate("plain-1", "plain", 1.0, 100.0, 68.0, 68.0, tie_rank=0)
    choice = soonest([a, dearer], TOKENS, max_regret=0.0)  # a rank never outweighs a cost
    assert choice is not None and choice.candidate.name == "plain-0"


def test_a_free_instance_another_replica_may_take_at_once_costs_its_expected_wait() -> None:
    # mtp is 10% faster, but another replica sends a request there at the same moment 30% of
    # the time (and one of the two then waits a whole service): plain is sooner on average
    mtp = Candidate("mtp-1", "mtp", 0.0, 100.0, 61.2, 61.2, contended=0.3)
    plain = Candidate("plain-0", "plain", 0.0, 100.0, 68.0, 68.0)
    assert mtp.cost_ms(TOKENS) == pytest.approx(1.3 * mtp.finish_ms(TOKENS))
    choice = soonest([mtp, plain], TOKENS, max_regret=0.0)
    assert choice is not None and choice.candidate.name == "plain-0"
    assert choice.finish_ms["mtp-1"] < choice.finish_ms["plain-0"]  # its finish is unchanged
    uncontended = Candidate("mtp-1", "mtp", 0.0, 100.0, 61.2, 61.2, contended=0.05)
    choice = soonest([uncontended, plain], TOKENS, max_regret=0.0)
    assert choice is not None and choice.candidate.name == "mtp-1"
