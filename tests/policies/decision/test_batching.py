"""The finish rule on instances that serve several requests at once: the wait for a slot, the
batch a request joins, what it costs the requests it decodes beside, and `slots: 1` as before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from classifiers.scores import Scores
from policies.decision.ask import Ask, BackendState, State
from policies.decision.batching import batch_work, joined_batch, slot_wait
from policies.decision.decide import decide
from policies.decision.finish import Candidate, InFlight, Running, queued_ms
from policies.learner.observation import Observation
from policies.learner.routemodel import RouteModel, gather
from policies.policyfile.machine import LOCAL_PAIR
from policies.policyfile.schema import Assume
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
    # full: it waits for a slot and slows no one as it joins, but each request that comes
    # while it waits or decodes (as many as are there now) waits a slot's share of it more
    full = c._replace(queue_ms=50.0, waiting=5)
    assert full.cost_ms(40) == pytest.approx(50.0 + service + 2 * service / 4)


def _cpu_model(slope: float, n: int = 40) -> RouteModel:
    """The local pair's prior with both plain instances measured at 50 ms a token alone and
    x b^`slope` in a batch of b."""
    records = [Observation("chat", "en", 0.3, "plain", 100, 1000.0 / (50.0 * batch**slope),
                           backend=name, ts=f"{name}{i:04d}", batch=batch, batch_start=batch)
               for i in range(n) for name in ("plain-0", "plain-1")
               for batch in [1.0 + i % 4]]
    return RouteModel(LOCAL_PAIR, gather(records, Assume()))


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
    one = (_serving("plain-0", 1, 5_000.0, slots=1), _serving("plain-1", 1, 8_000.0, slots=1))
    decided = decide(Ask(FEATURES, Scores("chat", "en", {"chat": 1.0})), State(POLICY, model, one))
    assert decided.batch == 1 and decided.backend == "plain-0"
    # its own service at the pace alone, whatever the curve learned; the queue of one ahead
    prefill = decided.service_ms - decided.tokens * model.t_plain_ms
    assert decided.pace_ms == pytest.approx(model.t_plain_ms)
    assert decided.queue_ms == pytest.approx(queued_ms(one[0].queue))
    assert decided.finish_ms["plain-1"] == pytest.approx(
        queued_ms(one[1].queue) + prefill + decided.tokens * model.t_plain_ms)
