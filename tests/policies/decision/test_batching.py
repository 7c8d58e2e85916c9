"""The finish rule on instances that serve several requests at once: the wait for a slot, the
batch a request joins, what it costs the requests it decodes beside, and `slots: 1` as before."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from classifiers.scores import Scores
from policies.decision.ask import Ask, BackendState, State
from policies.decision.batching import batch_work, joined_batch, slot_wait
from policies.decision.decide import decide
from policies.decision.finish import Candidate, InFlight, Running
from policies.learner.batch import BatchEvidence
from policies.learner.routemodel import RouteEvidence, RouteModel
from policies.policyfile.machine import LOCAL_PAIR
from tests.policies.decision.test_decide import FEATURES, POLICY


@pytest.mark.parametrize(
    ("serving", "waiting", "slots", "wait"),
    [
        ([100.0, 300.0], [], 3, 0.0),  # a slot free: no wait
        ([100.0, 300.0], [], 2, 100.0),  # full: the first to end frees one
        ([100.0, 300.0], [50.0], 2, 150.0),  # the one waiting takes it, then ends first
        ([100.0, 300.0], [500.0], 2, 300.0),  # the one waiting takes the first, ours the second
        ([400.0], [100.0, 100.0], 1, 600.0),  # one slot: the queue of one, as before
    ],
)
def test_the_wait_for_a_slot(serving: list[float], waiting: list[float], slots: int,
                             wait: float) -> None:
    assert slot_wait(serving, waiting, slots) == pytest.approx(wait)


def test_the_oldest_are_served_and_the_rest_wait_their_turn() -> None:
    running = [Running(1000.0, 9.0), Running(1000.0, 8.0), Running(700.0, 9.5)]
    queued = batch_work(running, 10.0, slots=2)  # sent 2 s and 1 s ago served, the last waits
    assert queued.requests == 3
    assert len(queued.serving) == 2
    # the request sent 2 s ago and predicted 1 s has overrun: a fifth of it more (no spread)
    assert min(queued.serving) == pytest.approx(200.0)
    # ours waits for the first slot to free, then the waiting one's whole 700 ms is ahead of
    # the second: the first free slot after that is at 200 + 700 = 900 or the other's end
    assert queued.work_ms == pytest.approx(min(200.0 + 700.0, max(queued.serving)))
    assert joined_batch(3, 2) == 2 and joined_batch(1, 4) == 2


def test_joining_a_batch_costs_the_requests_there_their_slowdown_while_they_overlap() -> None:
    c = Candidate("a", "plain", 0.0, 0.0, 10.0, 10.0, waiting=2, slots=4,
                  serving=(100.0, 1000.0), slowdown=2.0, batch=3)
    service = c.service_ms(40)  # 400 ms
    # one ends first (100 ms left, now twice as slow: 100 more), the other outlives it
    # (it decodes at half speed while ours runs: 400 x (1 - 1/2) = 200 lost)
    assert c.cost_ms(40) == pytest.approx(service + 100.0 + 200.0)
    waiting = c._replace(queue_ms=50.0)  # waits for a slot: slows no one as it joins
    assert waiting.cost_ms(40) == pytest.approx(50.0 + service)


def _cpu_model(slope: float, n: int = 40) -> RouteModel:
    """The local pair's prior with every instance's batch curve measured at `slope`."""
    sums = BatchEvidence()
    for i in range(n):
        batch = 1 + i % 4
        sums = sums.plus(batch, slope * math.log(batch))
    return RouteModel(LOCAL_PAIR, RouteEvidence(batch={"plain-0": sums, "plain-1": sums}))


def _serving(name: str, requests: int, left_ms: float, slots: int = 4) -> BackendState:
    queue = tuple(InFlight(predicted_ms=left_ms + 100.0, elapsed_ms=100.0)
                  for _ in range(requests))
    return BackendState(name, "plain", inflight=requests, queue=queue, slots=slots)


def test_on_a_cpu_a_busy_batch_is_priced_by_its_slowdown_and_an_idle_instance_wins() -> None:
    model = _cpu_model(1.0)
    state = State(POLICY, model, (_serving("plain-0", 3, 20_000.0), _serving("plain-1", 0, 0)))
    decision = decide(Ask(FEATURES, Scores("chat", "en", {"chat": 1.0})), state)
    assert decision.backend == "plain-1" and decision.batch == 1
    busy = decide(Ask(FEATURES, Scores("chat", "en", {"chat": 1.0})),
                  replace(state, backends=(state.backends[0],)))
    # alone it joins the batch of 3: 4 requests decoding, each ~4x slower on a CPU
    assert busy.batch == 4
    prefill = decision.service_ms - decision.tokens * decision.pace_ms
    factor = (busy.service_ms - prefill) / (busy.tokens * busy.pace_ms)
    assert 3.5 < factor <= 4.0


def test_on_a_flat_gpu_curve_a_busy_batch_costs_little() -> None:
    model = _cpu_model(0.03)
    state = State(POLICY, model, (_serving("plain-0", 2, 20_000.0), _serving("plain-1", 0, 0)))
    decision = decide(Ask(FEATURES, Scores("chat", "en", {"chat": 1.0})), state)
    finish = decision.finish_ms
    assert finish["plain-0"] / finish["plain-1"] < 1.05  # a batch of 3 barely slower


def test_one_slot_is_the_queue_of_one_as_before() -> None:
    model = _cpu_model(1.0)
    one = (_serving("plain-0", 1, 5_000.0, slots=1), _serving("plain-1", 0, 0, slots=1))
    legacy = tuple(b._replace(slots=1) for b in one)
    ask = Ask(FEATURES, Scores("chat", "en", {"chat": 1.0}))
    decided = decide(ask, State(POLICY, model, one))
    assert decided == decide(ask, State(POLICY, RouteModel(LOCAL_PAIR, RouteEvidence()), legacy))
    assert decided.finish_ms["plain-0"] > 5_000.0  # queued behind the one there
    assert decided.batch == 1
