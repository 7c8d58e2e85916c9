"""Each instance's per-token time against its batch, learned from its records, and the paces
taken back to a batch of 1 by it."""

from __future__ import annotations

import json
import math
import random

import pytest

from policies.learner.batch import PRIOR_CURVE, SLOPE_PRIOR, BatchEvidence
from policies.learner.observation import Observation
from policies.learner.routemodel import RouteEvidence, RouteModel, gather, observe
from policies.policyfile.machine import LOCAL_PAIR
from policies.policyfile.schema import Assume

ASSUME = Assume()
PACE_MS = 30.0  # the instance's ms per token alone


@pytest.mark.parametrize("slope", [0.0, 0.45, 0.9])
def test_the_slope_is_learned_whatever_the_route_models_bias(slope: float) -> None:
    rng = random.Random(4)
    sums = BatchEvidence()
    for _ in range(60):
        batch = rng.uniform(1.0, 4.0)
        # the route model 20% off at a batch of 1: the intercept takes it, not the slope
        sums = sums.plus(batch, math.log(1.2) + slope * math.log(batch) + rng.gauss(0, 0.05))
    curve = sums.curve()
    assert curve.slope == pytest.approx(slope, abs=0.08)
    assert curve.sd < PRIOR_CURVE.sd / 3 and curve.measured
    assert curve.factor(4.0) == pytest.approx(4.0**curve.slope)


def test_an_instance_never_seen_in_a_batch_keeps_the_prior() -> None:
    sums = BatchEvidence()
    for _ in range(30):
        sums = sums.plus(1.0, 0.3)
    assert sums.curve().slope == pytest.approx(SLOPE_PRIOR) and not sums.curve().measured
    assert sums.curve().factor(1.0) == 1.0


def _served(batch: float, i: int, slope: float = 0.9, logged: bool = True) -> Observation:
    ms = PACE_MS * batch**slope
    return Observation("chat", "en", 0.3, "plain", 100, 1000.0 / ms, backend="plain-0",
                       ts=f"t{i:04d}", batch=batch, pace_ms=PACE_MS if logged else None)


def test_paces_measured_in_batches_are_learned_as_the_pace_alone() -> None:
    records = [_served(1.0 + i % 4, i) for i in range(80)]
    model = RouteModel(LOCAL_PAIR, gather(records, ASSUME))
    assert model.batch_curve("plain-0").slope == pytest.approx(0.9, abs=0.05)
    assert model.t_plain_ms == pytest.approx(PACE_MS, rel=0.05)  # not the batches' mean pace
    online = RouteEvidence()
    for o in records:
        online = observe(online, o, ASSUME)
    assert RouteModel(LOCAL_PAIR, online).t_plain_ms == pytest.approx(PACE_MS, rel=0.1)


def test_records_without_a_batch_are_learned_as_before_and_the_sums_survive_json() -> None:
    older = [_served(1.0, i, logged=False) for i in range(20)]
    evidence = gather(older, ASSUME)
    assert not evidence.batch
    assert evidence.plain.total == pytest.approx(20 * math.log(PACE_MS))
    batched = gather([_served(1.0 + i % 4, i) for i in range(20)], ASSUME)
    again = RouteEvidence.from_json(json.loads(json.dumps(batched.as_json())))
    assert again.batch == batched.batch
    assert RouteEvidence.from_json({**evidence.as_json()} | {"batch": {}}).batch == {}


def test_policy_explain_shows_each_instances_curve_and_the_speedups_batch_term() -> None:
    from policies.explain import describe_model

    records = [_served(1.0 + i % 4, i) for i in range(40)]
    ngram = [Observation("chat", "en", 0.3, "mtp", 100, 1000.0 / (PACE_MS * (1 + i % 4)**0.6),
                         backend="ngram-0", spec="ngram-simple", ts=f"u{i:04d}",
                         batch=1.0 + i % 4, pace_ms=PACE_MS, temperature=0.7)
             for i in range(40)]
    lines = "\n".join(describe_model(RouteModel(LOCAL_PAIR, gather(records + ngram, ASSUME))))
    assert "plain-0" in lines and "ngram-0" in lines
    assert "x3.4" in lines  # 4^0.9 = 3.48
    # n-gram's slope 0.6 against plain's 0.9: its gain grows with the batch here, by -0.3
    assert "ngram-simple -0.3" in lines or "ngram-simple -0.29" in lines
    assert "no record ran in a batch" in "\n".join(describe_model(RouteModel(LOCAL_PAIR,
                                                                             RouteEvidence())))
